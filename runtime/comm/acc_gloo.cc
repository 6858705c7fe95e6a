/*
 * acc_gloo.cc — the extern "C" shim over Gloo (see acc_gloo.h): process
 * group creation (TCP device + rendezvous::Context::connectFullMesh) and
 * the collectives through Gloo's own algorithms (gloo::allreduce with
 * AllreduceOptions/ring, gloo::broadcast, gloo::allgather, gloo::barrier).
 * No exception ever leaves this file.
 */
#include "acc_gloo.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "acc_gloo_store.h"
#include "acc_gloo_poll.h"
#include "acc_gloo_waker.h"

/* One cached buffer-based algorithm (see acc_gloo_all_reduce_cached and
 * all_gather_sync). It is found by what every rank asks for alike (kind
 * and size, never the caller's addresses: the ranks' heaps differ, so a
 * choice made from addresses could differ between ranks, and ranks that
 * disagree on which algorithm runs, or on the context slots a new one
 * takes, wait for each other forever). It works on its own buffers; the
 * caller's data is copied in and out (two memcpys of at most
 * kSyncMaxBytes: a few percent of the transfer). */
struct acc_gloo_cached {
  bool gather;       /* all-gather, else all-reduce */
  size_t count;      /* all-reduce: elements; all-gather: bytes per rank */
  acc_dtype_t dtype; /* all-reduce only */
  acc_op_t op;       /* all-reduce only */
  acc_gloo_algo_t kind;
  std::vector<unsigned char> in, out; /* all-reduce: in, in place; all-gather: in -> out */
  std::unique_ptr<gloo::Algorithm> algo;

  bool same(const acc_gloo_cached &o) const {
    return gather == o.gather && count == o.count && (gather || (dtype == o.dtype && op == o.op));
  }
  size_t bytes() const { return in.size() + out.size(); }
};

struct acc_gloo {
  /* declared before dev: destroyed after it (the loop calls it until the
   * device's loop thread ends) */
  std::unique_ptr<accrt::LoopWaker> waker;
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  /* A second full mesh (its own rendezvous; one made by Gloo's
   * ContextFactory left the first mesh's operations 10-20x slower) whose
   * pairs are in Gloo's synchronous mode: the calling thread reads and
   * writes the sockets itself, busy-polling when busy_poll. The
   * buffer-based all-reduces up to kSyncMaxBytes run on it. Without it
   * every message costs two thread wake-ups (Gloo's event loop, then the
   * caller), each of which often took a whole 4 ms scheduler tick on the
   * 2-vCPU test machine: a training step of 784-256-10 went from 8-12 ms
   * to 4 ms. The AllreduceOptions-style collectives need the asynchronous
   * mesh (Gloo refuses unbound buffers on synchronous pairs). */
  std::shared_ptr<gloo::Context> sctx;
  std::vector<std::string> peer_addr; /* per rank, "[IP]:PORT" (GlooStore::addresses) */
  /* polls or sleeps per collective on sctx (acc_gloo_poll.h); polling
   * allowed by busy_poll at acc_gloo_connect */
  accrt::PollGovernor poll{false};
  /* It costs a second rendezvous (~15 ms here), which a program that
   * all-reduces once (a launch that only checks the group) should not
   * pay: it is made at the first all-reduce (or small all-gather) of a
   * size seen before, i.e. in a training loop, through the store
   * acc_gloo_connect got. */
  acc_store_client_t *store = nullptr;
  std::string sync_prefix;
  bool sync_tried = false;
  int lost_peer = -1;                /* rank of the connection the last failure lost */
  /* a group of some of the world's ranks (the node leaders', HYBRID_SHARD's
   * replicas): the world rank of each member, named in error texts;
   * empty: the group is the world */
  std::vector<int> world_rank;
  std::vector<acc_gloo_cached> seen; /* sizes all-reduced/gathered before sctx */
  std::chrono::milliseconds timeout{300000};
  std::vector<acc_gloo_cached> cache; /* most recently used last */
  /* Tag of the next AllreduceOptions-style operation: each gets its own,
   * as ProcessGroupGloo does (every rank issues the same sequence). */
  uint32_t next_tag = 1;

  /* Asynchronous all-reduces (acc_gloo_all_reduce_async): one worker
   * thread runs queued jobs in order, like ProcessGroupGloo's work
   * threads; synchronous calls first wait for the queue to drain, so the
   * group never runs two collectives at once. */
  struct job {
    void *buf;
    size_t count;
    acc_dtype_t dtype;
    acc_op_t op;
  };
  std::thread worker;
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  std::deque<job> queue;
  size_t inflight = 0; /* queued + running */
  bool stop = false;
  acc_result_t async_err = ACC_OK;
  std::string async_msg;
};

/* Cached algorithms per group: a training loop all-reduces one or two
 * buffers over and over; a few more cover metrics. */
static const size_t kCachedAlgorithms = 16;

extern "C" {
static void drain(acc_gloo_t *g); /* wait for the asynchronous queue */
}
static const size_t kCachedBytes = size_t(128) << 20;
static const size_t kSyncMaxBytes = size_t(4) << 20;

namespace {

bool contains(const std::string &s, const char *needle) {
  return s.find(needle) != std::string::npos;
}

/* Map a Gloo I/O error text to a result code. */
acc_result_t classify(const std::string &what) {
  if (contains(what, "Timed out") || contains(what, "timeout") || contains(what, "Timeout"))
    return ACC_ERR_TIMEOUT;
  if (contains(what, "closed by peer") || contains(what, "reset by peer") ||
      contains(what, "Broken pipe") || contains(what, "ECONNRESET") ||
      contains(what, "Connection refused") || contains(what, "EPIPE"))
    return ACC_ERR_PEER;
  return ACC_ERR_BACKEND;
}

const char *advice(acc_result_t r) {
  switch (r) {
  case ACC_ERR_TIMEOUT:
    return " (a peer did not take part in time: it may be hung, slower than "
           "NBFORK_TIMEOUT_S, or calling a different collective)";
  case ACC_ERR_PEER:
    return " (a peer process exited or failed; see its own error)";
  default:
    return "";
  }
}

/* The rank whose connection a Gloo I/O error names ("Connection closed by
 * peer [IP]:PORT", "Read error [IP]:PORT: ..."): every rank listens on
 * its own address (one device per process). Only the side that connected
 * sees the peer's listening address; the side that accepted sees an
 * ephemeral port that no store key holds, and then (with more than two
 * ranks) the rank stays unnamed. -1 when none matches. */
int peer_rank_in(const std::vector<std::string> &addrs, const std::string &what) {
  for (size_t i = 0; i < addrs.size(); i++) {
    if (addrs[i].empty())
      continue;
    size_t at = what.find(addrs[i]);
    size_t end = at + addrs[i].size();
    if (at != std::string::npos && (end == what.size() || !isdigit((unsigned char)what[end])))
      return static_cast<int>(i);
  }
  return -1;
}

/* Run `f`, catching everything; on failure fill err and close the group's
 * connections so that the other ranks fail fast too. A lost peer is named
 * by its rank when its address tells (peer_rank_in). */
template <typename F>
acc_result_t guard(acc_gloo_t *g, const char *what, char *err, size_t errlen, F &&f) {
  acc_result_t r = ACC_OK;
  std::string msg;
  bool from_store = false;
  try {
    f();
    return ACC_OK;
  } catch (const accrt::StoreError &e) {
    r = e.code;
    msg = e.what();
    from_store = true;
  } catch (const gloo::IoException &e) {
    msg = e.what();
    r = classify(msg);
  } catch (const std::exception &e) {
    msg = e.what();
    r = classify(msg);
    if (r == ACC_OK)
      r = ACC_ERR_BACKEND;
  } catch (...) {
    msg = "unknown C++ exception";
    r = ACC_ERR_BACKEND;
  }
  /* The rank whose connection failed, for the rank's state record
   * (acc_gloo_lost_peer): the launcher's report names it from there. A
   * timeout names one too when its address tells: on several hosts, a
   * timeout on a peer of another host points at that host. */
  int lost = (r == ACC_ERR_PEER || r == ACC_ERR_TIMEOUT) && g ? peer_rank_in(g->peer_addr, msg) : -1;
  if (r == ACC_ERR_PEER && lost < 0 && g && g->ctx && g->ctx->size == 2)
    lost = 1 - g->ctx->rank; /* the only peer */
  if (g)
    g->lost_peer = lost;
  if (err && errlen && lost >= 0 && r == ACC_ERR_PEER) {
    int w = g && (size_t)lost < g->world_rank.size() ? g->world_rank[(size_t)lost] : lost;
    std::snprintf(err, errlen,
                  "%s failed: %s (the connection to rank %d was lost: rank %d exited or failed "
                  "while this rank still needed it; see rank %d's own error)",
                  what, msg.c_str(), w, w, w);
  } else if (err && errlen)
    std::snprintf(err, errlen, "%s failed: %s%s", what, msg.c_str(), from_store ? "" : advice(r));
  if (g && g->ctx) {
    try {
      g->ctx->closeConnections();
      if (g->sctx)
        g->sctx->closeConnections();
    } catch (...) {
    }
  }
  return r;
}

/* Gloo's option setters are templated on the element type only to know
 * its size; the reduction is ours, so an unsigned type of the right width
 * stands for every dtype of that width. */
template <typename T>
void run_allreduce(acc_gloo_t *g, void *buf, size_t count, acc_reduce_fn fn, bool bcube = false) {
  gloo::AllreduceOptions opts(g->ctx);
  opts.setAlgorithm(bcube ? gloo::AllreduceOptions::Algorithm::BCUBE
                          : gloo::AllreduceOptions::Algorithm::RING);
  opts.setOutput(static_cast<T *>(buf), count);
  opts.setReduceFunction([fn](void *o, const void *a, const void *b, size_t n) { fn(o, a, b, n); });
  opts.setTimeout(g->timeout);
  opts.setTag(g->next_tag++);
  gloo::allreduce(opts);
}

template <typename T>
std::unique_ptr<gloo::Algorithm> make_cached(acc_gloo_t *g, void *buf, size_t count, acc_op_t op,
                                             acc_gloo_algo_t kind) {
  const gloo::ReductionFunction<T> *fn = op == ACC_MAX   ? gloo::ReductionFunction<T>::max
                                         : op == ACC_MIN ? gloo::ReductionFunction<T>::min
                                                         : gloo::ReductionFunction<T>::sum;
  std::vector<T *> ptrs{static_cast<T *>(buf)};
  const int n = static_cast<int>(count);
  /* Synchronous pairs write with blocking send(): two ranks sending each
   * other more than their sockets buffer would deadlock, so only buffers
   * up to kSyncMaxBytes run there (at most half of that in flight per
   * direction, against several MiB of loopback/TCP socket buffers; the
   * first deadlock seen here was at 16 MiB messages). */
  const size_t bytes = count * sizeof(T);
  const std::shared_ptr<gloo::Context> &ctx =
      g->sctx && bytes <= kSyncMaxBytes ? g->sctx : std::static_pointer_cast<gloo::Context>(g->ctx);
  gloo::Algorithm *a;
  switch (kind) {
  case ACC_GLOO_RING_CHUNKED:
    a = new gloo::AllreduceRingChunked<T>(ctx, ptrs, n, fn);
    break;
  case ACC_GLOO_RING_CACHED:
    a = new gloo::AllreduceRing<T>(ctx, ptrs, n, fn);
    break;
  default:
    a = new gloo::AllreduceHalvingDoubling<T>(ctx, ptrs, n, fn);
    break;
  }
  return std::unique_ptr<gloo::Algorithm>(a);
}

} // namespace

extern "C" {

acc_result_t acc_gloo_connect(acc_gloo_t **out, int rank, int size, const char *hostname,
                              acc_store_client_t *store, const char *key_prefix, int timeout_ms,
                              int busy_poll, char *err, size_t errlen) {
  *out = nullptr;
  acc_gloo_t *g = nullptr;
  try {
    g = new acc_gloo_t();
  } catch (...) {
    if (err && errlen)
      std::snprintf(err, errlen, "out of memory");
    return ACC_ERR_NO_MEMORY;
  }
  g->timeout = std::chrono::milliseconds(timeout_ms > 0 ? timeout_ms : 300000);
  std::string where = std::string("Gloo rendezvous (rank ") + std::to_string(rank) + " of " +
                      std::to_string(size) + ", listening on " + (hostname ? hostname : "?") + ")";
  acc_result_t r = guard(nullptr, where.c_str(), err, errlen, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = hostname ? hostname : "127.0.0.1";
    g->dev = gloo::transport::tcp::CreateDevice(attr);
    g->waker = accrt::LoopWaker::attach(g->dev);
    g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    g->ctx->setTimeout(g->timeout);
    accrt::GlooStore st(store, key_prefix ? key_prefix : "", static_cast<int>(g->timeout.count()));
    accrt::WakeScope awake(g->waker.get());
    g->ctx->connectFullMesh(st, g->dev);
    g->peer_addr = st.addresses();
    /* the synchronous mesh connects later, at the first repeated
     * all-reduce (connect_sync) */
    g->store = store;
    g->sync_prefix = std::string(key_prefix ? key_prefix : "") + "sync/";
    g->poll = accrt::PollGovernor(busy_poll != 0);
  });
  if (r != ACC_OK) {
    acc_gloo_destroy(&g);
    return r;
  }
  *out = g;
  return ACC_OK;
}

void acc_gloo_destroy(acc_gloo_t **g_p) {
  if (!g_p || !*g_p)
    return;
  acc_gloo_t *g = *g_p;
  *g_p = nullptr;
  if (g->worker.joinable()) { /* finish queued all-reduces, stop the worker */
    {
      std::lock_guard<std::mutex> lk(g->mu);
      g->stop = true;
    }
    g->cv_work.notify_one();
    g->worker.join();
  }
  /* Gloo's TCP event loop notices each closed pair and its own end only
   * at a loop tick (see acc_gloo_waker.h): the waker shortens those, and
   * the teardown runs on a detached thread, so that a launched worker,
   * which exits right after, never waits for it (the caller left the
   * group after the final barrier, so no peer reads these connections). */
  auto teardown = [g] {
    try {
      if (g->waker)
        g->waker->arm();
      g->cache.clear(); /* algorithms hold buffers of the pairs */
      g->sctx.reset();
      g->ctx.reset(); /* pairs first: they refer to the device */
      std::weak_ptr<gloo::transport::Device> alive = g->dev;
      g->dev.reset();
      /* the device (and its loop) should be gone now; should something
       * still hold it, its loop may yet call the waker: keep it */
      if (alive.lock())
        (void)g->waker.release();
    } catch (...) {
    }
    delete g;
  };
  try {
    std::thread(teardown).detach();
  } catch (...) {
    teardown(); /* no thread could be started: wait for it here */
  }
}

int acc_gloo_lost_peer(const acc_gloo_t *g) {
  return g ? g->lost_peer : -1;
}

void acc_gloo_set_world_ranks(acc_gloo_t *g, const int *world_rank, int size) {
  if (g && world_rank && size > 0)
    g->world_rank.assign(world_rank, world_rank + size);
}

void acc_gloo_release_store(acc_gloo_t *g) {
  if (!g)
    return;
  drain(g);
  g->store = nullptr;
  g->sync_tried = true;
}

acc_result_t acc_gloo_all_reduce(acc_gloo_t *g, void *buf, size_t count, size_t esz,
                                 acc_reduce_fn fn, char *err, size_t errlen) {
  drain(g);
  std::string what = "all-reduce of " + std::to_string(count) + " elements";
  return guard(g, what.c_str(), err, errlen, [&] {
    switch (esz) {
    case 2:
      run_allreduce<uint16_t>(g, buf, count, fn);
      break;
    case 4:
      run_allreduce<uint32_t>(g, buf, count, fn);
      break;
    case 8:
      run_allreduce<uint64_t>(g, buf, count, fn);
      break;
    default:
      throw std::invalid_argument("unsupported element size");
    }
  });
}

const char *acc_gloo_algo_name(acc_gloo_algo_t algo) {
  switch (algo) {
  case ACC_GLOO_AUTO:
    return "auto";
  case ACC_GLOO_HALVING_DOUBLING:
    return "halving-doubling";
  case ACC_GLOO_RING_CHUNKED:
    return "ring-chunked";
  case ACC_GLOO_RING_CACHED:
    return "ring-cached";
  case ACC_GLOO_RING:
    return "ring";
  case ACC_GLOO_BCUBE:
    return "bcube";
  }
  return "?";
}

static int cacheable(acc_dtype_t dtype) {
  return dtype == ACC_F32 || dtype == ACC_F64 || dtype == ACC_I32 || dtype == ACC_I64;
}

/* Evict the least recently used cached algorithms (the same choice on
 * every rank) until one more, keeping `bytes`, fits within
 * kCachedAlgorithms entries and kCachedBytes of buffers: each algorithm
 * keeps inboxes as large as its buffer. */
static void make_room(acc_gloo_t *g, size_t bytes) {
  auto &cache = g->cache;
  size_t total = bytes;
  for (const auto &e : cache)
    total += e.bytes();
  while (!cache.empty() && (cache.size() >= kCachedAlgorithms || total > kCachedBytes)) {
    total -= cache.front().bytes();
    cache.erase(cache.begin());
  }
}

static void connect_sync(acc_gloo_t *g);

/* Whether an operation `key` may run a cached algorithm on the
 * synchronous mesh: 1 yes (connected now if need be), 0 no (run it on the
 * asynchronous mesh; `key` is remembered), -1 connecting failed (*r).
 * Gloo's buffer-based algorithms must not run on the asynchronous mesh:
 * once they had, its AllreduceOptions operations took 10-50x longer (seen
 * with 16 MiB). So the first operation of a kind and size runs there with
 * the options API, and the second one (a training loop: every rank
 * decides the same, as every rank makes the same calls) connects the
 * synchronous mesh, on which it and all later ones run. */
static int sync_mesh_for(acc_gloo_t *g, acc_gloo_cached &key, char *err, size_t errlen,
                         acc_result_t *r) {
  if (g->sctx)
    return 1;
  bool seen = false;
  for (const auto &k : g->seen)
    if (k.same(key))
      seen = true;
  if (!seen || g->sync_tried) {
    if (!seen && g->seen.size() < 64)
      g->seen.push_back(std::move(key));
    return 0;
  }
  *r = guard(g, "connecting the synchronous Gloo mesh", err, errlen, [&] { connect_sync(g); });
  if (*r != ACC_OK)
    return -1;
  g->seen.clear();
  return g->sctx ? 1 : 0;
}

/* The cached entry like `key`, made by `make(entry)` (which sizes its
 * buffers and creates its algorithm) when there is none; it becomes the
 * most recently used. Throws what `make` throws. */
extern "C++" {
template <typename Make>
static acc_gloo_cached &cached_entry(acc_gloo_t *g, const acc_gloo_cached &key, Make &&make) {
  auto &cache = g->cache;
  size_t i = 0;
  for (; i < cache.size(); i++)
    if (cache[i].same(key) && cache[i].kind == key.kind)
      break;
  if (i == cache.size()) {
    acc_gloo_cached c{key.gather, key.count, key.dtype, key.op, key.kind, {}, {}, nullptr};
    make(c);
    make_room(g, c.bytes());
    cache.push_back(std::move(c));
  } else if (i + 1 != cache.size()) {
    std::rotate(cache.begin() + (long)i, cache.begin() + (long)i + 1, cache.end());
  }
  return cache.back();
}
} // extern "C++"

/* Connect the synchronous mesh (see `sctx`); throws on failure. */
static void connect_sync(acc_gloo_t *g) {
  g->sync_tried = true;
  if (!g->store)
    return;
  auto sctx = std::make_shared<gloo::rendezvous::Context>(g->ctx->rank, g->ctx->size);
  sctx->setTimeout(g->timeout);
  accrt::GlooStore st(g->store, g->sync_prefix, static_cast<int>(g->timeout.count()));
  accrt::WakeScope awake(g->waker.get());
  sctx->connectFullMesh(st, g->dev);
  for (int i = 0; i < sctx->size; i++)
    if (i != sctx->rank)
      sctx->getPair(i)->setSync(true, false); /* polling: per call, g->poll */
  g->sctx = sctx;
}

static acc_result_t all_reduce_now(acc_gloo_t *g, void *buf, size_t count, acc_dtype_t dtype,
                                   acc_op_t op, acc_gloo_algo_t algo, char *err, size_t errlen) {
  if (count == 0)
    return ACC_OK;
  const size_t esz = acc_dtype_size(dtype);
  if (algo == ACC_GLOO_AUTO)
    algo = acc_gloo_choose_algo(g, count * esz);
  const bool cached_kind = algo == ACC_GLOO_HALVING_DOUBLING || algo == ACC_GLOO_RING_CHUNKED ||
                           algo == ACC_GLOO_RING_CACHED;
  if (cached_kind && (!cacheable(dtype) || count > (size_t)INT32_MAX))
    algo = ACC_GLOO_RING; /* Gloo's typed algorithms: no half types, int counts */
  std::string what = "all-reduce of " + std::to_string(count) + " elements";
  acc_reduce_fn fn = acc_reduce_get(dtype, op);
  if (algo == ACC_GLOO_RING || algo == ACC_GLOO_BCUBE) {
    const bool bcube = algo == ACC_GLOO_BCUBE;
    return guard(g, what.c_str(), err, errlen, [&] {
      switch (esz) {
      case 2:
        run_allreduce<uint16_t>(g, buf, count, fn, bcube);
        break;
      case 4:
        run_allreduce<uint32_t>(g, buf, count, fn, bcube);
        break;
      case 8:
        run_allreduce<uint64_t>(g, buf, count, fn, bcube);
        break;
      default:
        throw std::invalid_argument("unsupported element size");
      }
    });
  }
  acc_gloo_cached key{false, count, dtype, op, algo, {}, {}, nullptr};
  if (count * esz <= kSyncMaxBytes) {
    acc_result_t r = ACC_OK;
    int sync = sync_mesh_for(g, key, err, errlen, &r);
    if (sync < 0)
      return r;
    if (sync == 0)
      return all_reduce_now(g, buf, count, dtype, op, ACC_GLOO_RING, err, errlen);
  }
  return guard(g, what.c_str(), err, errlen, [&] {
    acc_gloo_cached &e = cached_entry(g, key, [&](acc_gloo_cached &c) {
      c.in.resize(count * esz);
      void *own = c.in.data();
      switch (dtype) {
      case ACC_F32:
        c.algo = make_cached<float>(g, own, count, op, algo);
        break;
      case ACC_F64:
        c.algo = make_cached<double>(g, own, count, op, algo);
        break;
      case ACC_I32:
        c.algo = make_cached<int32_t>(g, own, count, op, algo);
        break;
      default:
        c.algo = make_cached<int64_t>(g, own, count, op, algo);
        break;
      }
    });
    std::memcpy(e.in.data(), buf, count * esz);
    if (g->sctx && count * esz <= kSyncMaxBytes) { /* on the synchronous mesh */
      accrt::PolledRun polled(g->poll, g->sctx);
      e.algo->run();
    } else {
      e.algo->run();
    }
    std::memcpy(buf, e.in.data(), count * esz);
  });
}

void acc_gloo_poll_counts(const acc_gloo_t *g, long *polled, long *slept) {
  *polled = g ? g->poll.polled() : 0;
  *slept = g ? g->poll.slept() : 0;
}

acc_result_t acc_gloo_all_reduce_algo(acc_gloo_t *g, void *buf, size_t count, acc_dtype_t dtype,
                                      acc_op_t op, acc_gloo_algo_t algo, char *err, size_t errlen) {
  drain(g);
  return all_reduce_now(g, buf, count, dtype, op, algo, err, errlen);
}

static void worker_main(acc_gloo_t *g) {
  for (;;) {
    acc_gloo::job j;
    {
      std::unique_lock<std::mutex> lk(g->mu);
      g->cv_work.wait(lk, [g] { return g->stop || !g->queue.empty(); });
      if (g->queue.empty())
        return; /* stop */
      j = g->queue.front();
      g->queue.pop_front();
    }
    acc_result_t r = ACC_OK;
    char err[1024] = "";
    if (g->async_err == ACC_OK) { /* after a failure the group is closed: skip */
      r = all_reduce_now(g, j.buf, j.count, j.dtype, j.op, ACC_GLOO_AUTO, err, sizeof err);
      if (r == ACC_OK && j.op == ACC_AVG)
        acc_reduce_divide(j.buf, j.count, j.dtype, g->ctx->size);
    }
    std::lock_guard<std::mutex> lk(g->mu);
    if (r != ACC_OK && g->async_err == ACC_OK) {
      g->async_err = r;
      g->async_msg = err;
    }
    if (--g->inflight == 0)
      g->cv_done.notify_all();
  }
}

/* Wait until no asynchronous all-reduce is queued or running. */
static void drain(acc_gloo_t *g) {
  if (!g || !g->worker.joinable())
    return;
  std::unique_lock<std::mutex> lk(g->mu);
  g->cv_done.wait(lk, [g] { return g->inflight == 0; });
}

acc_result_t acc_gloo_all_reduce_async(acc_gloo_t *g, void *buf, size_t count, acc_dtype_t dtype,
                                       acc_op_t op, char *err, size_t errlen) {
  if (count == 0)
    return ACC_OK;
  try {
    if (!g->worker.joinable())
      g->worker = std::thread(worker_main, g);
    std::lock_guard<std::mutex> lk(g->mu);
    g->queue.push_back({buf, count, dtype, op});
    g->inflight++;
  } catch (...) { /* no thread: run it here */
    acc_result_t r = all_reduce_now(g, buf, count, dtype, op, ACC_GLOO_AUTO, err, errlen);
    if (r == ACC_OK && op == ACC_AVG)
      acc_reduce_divide(buf, count, dtype, g->ctx->size);
    return r;
  }
  g->cv_work.notify_one();
  return ACC_OK;
}

acc_result_t acc_gloo_wait(acc_gloo_t *g, char *err, size_t errlen) {
  if (!g)
    return ACC_OK;
  drain(g);
  std::lock_guard<std::mutex> lk(g->mu);
  if (g->async_err != ACC_OK && err && errlen)
    std::snprintf(err, errlen, "%s", g->async_msg.c_str());
  return g->async_err;
}

acc_result_t acc_gloo_all_reduce_cached(acc_gloo_t *g, void *buf, size_t count, acc_dtype_t dtype,
                                        acc_op_t op, char *err, size_t errlen) {
  if (count == 0 || count > (size_t)INT32_MAX || !cacheable(dtype))
    return ACC_ERR_UNSUPPORTED;
  return acc_gloo_all_reduce_algo(g, buf, count, dtype, op, ACC_GLOO_HALVING_DOUBLING, err, errlen);
}

/* The choice by size, from bench/allreduce.py --algos (2 processes,
 * loopback TCP, 2 vCPUs; median per call, each algorithm in its own run,
 * best of 2 runs; buffers up to kSyncMaxBytes on the synchronous
 * busy-polling mesh, larger ones on the asynchronous one):
 *
 *   size     ring-cached  halving-dbl  ring-chunked  options ring  PyTorch
 *   4 KiB        18 us        33 us        55 us         ~4 ms       145 us
 *   64 KiB       38 us        45 us        70 us         ~4 ms       287 us
 *   256 KiB      99 us       106 us       142 us         ~4 ms       413 us
 *   1 MiB       619 us       391 us       433 us         ~4 ms       963 us
 *   4 MiB       2.4 ms       1.9 ms       1.8 ms         ~4 ms       3.4 ms
 *   16 MiB        -          15 ms        15 ms          15 ms       16 ms
 *   64 MiB        -          66 ms        63 ms          52 ms       55 ms
 *
 * (The options-API ring's ~4 ms medians at small sizes are thread
 * wake-ups through Gloo's event loop, see `sctx`; PyTorch pays them too.)
 * So: Gloo's AllreduceRing for small buffers with 2 ranks (one exchange
 * of the whole buffer: the fewest round trips; with more ranks it would
 * send the whole buffer n-1 times, so halving-doubling there),
 * halving-doubling up to kSyncMaxBytes, and above it the AllreduceOptions
 * ring PyTorch uses (segmented; the buffer-based algorithms would also
 * keep inboxes as large as the buffer alive). */
acc_gloo_algo_t acc_gloo_choose_algo(const acc_gloo_t *g, size_t bytes) {
  const int world = g && g->ctx ? g->ctx->size : 2;
  if (bytes <= (256u << 10))
    return world == 2 ? ACC_GLOO_RING_CACHED : ACC_GLOO_HALVING_DOUBLING;
  if (bytes <= kSyncMaxBytes)
    return ACC_GLOO_HALVING_DOUBLING;
  return ACC_GLOO_RING;
}

acc_result_t acc_gloo_broadcast(acc_gloo_t *g, void *buf, size_t bytes, int root, char *err,
                                size_t errlen) {
  drain(g);
  std::string what =
      "broadcast of " + std::to_string(bytes) + " bytes from rank " + std::to_string(root);
  return guard(g, what.c_str(), err, errlen, [&] {
    gloo::BroadcastOptions opts(g->ctx);
    opts.setTag(g->next_tag++);
    opts.setOutput(static_cast<uint8_t *>(buf), bytes);
    opts.setRoot(root);
    opts.setTimeout(g->timeout);
    gloo::broadcast(opts);
  });
}

/* All-gather with Gloo's buffer-based ring on the synchronous mesh,
 * cached per size like the all-reduces; false when that
 * path does not apply (then the caller uses AllgatherOptions). Throws on
 * failure. Why: evaluation gathers small buffers once per batch (two per
 * batch in acc_gather_for_metrics); on the asynchronous mesh each cost
 * two thread wake-ups of Gloo's event loop, ~0.7 ms here, which made a
 * 2-process evaluation slower than a 1-process one. */
static bool all_gather_sync(acc_gloo_t *g, const void *send, void *recv, size_t bytes, char *err,
                            size_t errlen, acc_result_t *r) {
  const size_t total = bytes * static_cast<size_t>(g->ctx->size);
  if (total > kSyncMaxBytes || bytes > static_cast<size_t>(INT32_MAX))
    return false;
  acc_gloo_cached key{true, bytes, ACC_I64, ACC_SUM, ACC_GLOO_RING_CACHED, {}, {}, nullptr};
  int sync = sync_mesh_for(g, key, err, errlen, r);
  if (sync <= 0)
    return sync < 0;
  std::string what = "all-gather of " + std::to_string(bytes) + " bytes per rank";
  *r = guard(g, what.c_str(), err, errlen, [&] {
    acc_gloo_cached &e = cached_entry(g, key, [&](acc_gloo_cached &c) {
      c.in.resize(bytes);
      c.out.resize(total);
      std::vector<const uint8_t *> in{c.in.data()};
      c.algo.reset(
          new gloo::AllgatherRing<uint8_t>(g->sctx, in, c.out.data(), static_cast<int>(bytes)));
    });
    std::memcpy(e.in.data(), send, bytes); /* send may lie inside recv: copy it first */
    accrt::PolledRun polled(g->poll, g->sctx);
    e.algo->run();
    std::memcpy(recv, e.out.data(), total);
  });
  return true;
}

acc_result_t acc_gloo_all_gather(acc_gloo_t *g, const void *send, void *recv, size_t bytes,
                                 char *err, size_t errlen) {
  drain(g);
  acc_result_t r = ACC_OK;
  if (all_gather_sync(g, send, recv, bytes, err, errlen, &r))
    return r;
  std::string what = "all-gather of " + std::to_string(bytes) + " bytes per rank";
  return guard(g, what.c_str(), err, errlen, [&] {
    gloo::AllgatherOptions opts(g->ctx);
    opts.setTag(g->next_tag++);
    uint8_t *own = static_cast<uint8_t *>(recv) + static_cast<size_t>(g->ctx->rank) * bytes;
    if (send != own)
      opts.setInput(const_cast<uint8_t *>(static_cast<const uint8_t *>(send)), bytes);
    opts.setOutput(static_cast<uint8_t *>(recv), bytes * static_cast<size_t>(g->ctx->size));
    opts.setTimeout(g->timeout);
    gloo::allgather(opts);
  });
}

acc_result_t acc_gloo_barrier(acc_gloo_t *g, char *err, size_t errlen) {
  drain(g);
  return guard(g, "barrier", err, errlen, [&] {
    gloo::BarrierOptions opts(g->ctx);
    opts.setTag(g->next_tag++);
    opts.setTimeout(g->timeout);
    gloo::barrier(opts);
  });
}

} // extern "C"
