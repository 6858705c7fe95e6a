/*
 * acc_gloo.cc — the extern "C" shim over Gloo (see acc_gloo.h): process
 * group creation (TCP device + rendezvous::Context::connectFullMesh) and
 * the collectives through Gloo's own algorithms (gloo::allreduce with
 * AllreduceOptions/ring, gloo::broadcast, gloo::allgather, gloo::barrier).
 * No exception ever leaves this file.
 */
#include "acc_gloo.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "acc_gloo_store.h"

/* One cached buffer-based all-reduce (see acc_gloo_all_reduce_cached). */
struct acc_gloo_cached {
  void *buf;
  size_t count;
  acc_dtype_t dtype;
  acc_op_t op;
  acc_gloo_algo_t kind;
  std::unique_ptr<gloo::Algorithm> algo;
};

struct acc_gloo {
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::chrono::milliseconds timeout{300000};
  std::vector<acc_gloo_cached> cache; /* most recently used last */
  /* Tag of the next AllreduceOptions-style operation: each gets its own,
   * as ProcessGroupGloo does (every rank issues the same sequence). */
  uint32_t next_tag = 1;
};

/* Cached algorithms per group: a training loop all-reduces one or two
 * buffers over and over; a few more cover metrics. */
static const size_t kCachedAlgorithms = 8;

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

/* Run `f`, catching everything; on failure fill err and close the group's
 * connections so that the other ranks fail fast too. */
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
  if (err && errlen)
    std::snprintf(err, errlen, "%s failed: %s%s", what, msg.c_str(), from_store ? "" : advice(r));
  if (g && g->ctx) {
    try {
      g->ctx->closeConnections();
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
  gloo::Algorithm *a;
  switch (kind) {
  case ACC_GLOO_RING_CHUNKED:
    a = new gloo::AllreduceRingChunked<T>(g->ctx, ptrs, n, fn);
    break;
  case ACC_GLOO_RING_CACHED:
    a = new gloo::AllreduceRing<T>(g->ctx, ptrs, n, fn);
    break;
  default:
    a = new gloo::AllreduceHalvingDoubling<T>(g->ctx, ptrs, n, fn);
    break;
  }
  return std::unique_ptr<gloo::Algorithm>(a);
}

} // namespace

extern "C" {

acc_result_t acc_gloo_connect(acc_gloo_t **out, int rank, int size, const char *hostname,
                              acc_store_client_t *store, const char *key_prefix, int timeout_ms,
                              char *err, size_t errlen) {
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
    g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    g->ctx->setTimeout(g->timeout);
    accrt::GlooStore st(store, key_prefix ? key_prefix : "", static_cast<int>(g->timeout.count()));
    g->ctx->connectFullMesh(st, g->dev);
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
  /* Gloo's TCP event loop notices its end only at its next 10 ms epoll
   * timeout, once for the pairs and once for the device: ~20 ms that a
   * launched worker, which exits right after, would spend waiting. The
   * teardown runs on a detached thread instead (the caller left the group
   * after the final barrier, so no peer reads these connections). */
  auto teardown = [g] {
    try {
      g->cache.clear(); /* algorithms hold buffers of the pairs */
      g->ctx.reset();   /* pairs first: they refer to the device */
      g->dev.reset();
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

void acc_gloo_abort(acc_gloo_t *g) {
  if (!g || !g->ctx)
    return;
  try {
    g->ctx->closeConnections();
  } catch (...) {
  }
}

void acc_gloo_set_timeout(acc_gloo_t *g, int timeout_ms) {
  if (g && timeout_ms > 0) {
    g->timeout = std::chrono::milliseconds(timeout_ms);
    if (g->ctx)
      g->ctx->setTimeout(g->timeout);
  }
}

acc_result_t acc_gloo_all_reduce(acc_gloo_t *g, void *buf, size_t count, size_t esz,
                                 acc_reduce_fn fn, char *err, size_t errlen) {
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

acc_result_t acc_gloo_all_reduce_algo(acc_gloo_t *g, void *buf, size_t count, acc_dtype_t dtype,
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
  return guard(g, what.c_str(), err, errlen, [&] {
    auto &cache = g->cache;
    size_t i = 0;
    for (; i < cache.size(); i++)
      if (cache[i].buf == buf && cache[i].count == count && cache[i].dtype == dtype &&
          cache[i].op == op && cache[i].kind == algo)
        break;
    if (i == cache.size()) {
      if (cache.size() == kCachedAlgorithms)
        cache.erase(cache.begin()); /* least recently used: same choice on every rank */
      acc_gloo_cached c{buf, count, dtype, op, algo, nullptr};
      switch (dtype) {
      case ACC_F32:
        c.algo = make_cached<float>(g, buf, count, op, algo);
        break;
      case ACC_F64:
        c.algo = make_cached<double>(g, buf, count, op, algo);
        break;
      case ACC_I32:
        c.algo = make_cached<int32_t>(g, buf, count, op, algo);
        break;
      default:
        c.algo = make_cached<int64_t>(g, buf, count, op, algo);
        break;
      }
      cache.push_back(std::move(c));
      i = cache.size() - 1;
    } else if (i + 1 != cache.size()) {
      std::rotate(cache.begin() + (long)i, cache.begin() + (long)i + 1, cache.end());
      i = cache.size() - 1;
    }
    cache[i].algo->run();
  });
}

acc_result_t acc_gloo_all_reduce_cached(acc_gloo_t *g, void *buf, size_t count, acc_dtype_t dtype,
                                        acc_op_t op, char *err, size_t errlen) {
  if (count == 0 || count > (size_t)INT32_MAX || !cacheable(dtype))
    return ACC_ERR_UNSUPPORTED;
  return acc_gloo_all_reduce_algo(g, buf, count, dtype, op, ACC_GLOO_HALVING_DOUBLING, err, errlen);
}

acc_gloo_algo_t acc_gloo_choose_algo(const acc_gloo_t *g, size_t bytes) {
  (void)g;
  (void)bytes;
  return ACC_GLOO_HALVING_DOUBLING; /* provisional: measured below */
}

acc_result_t acc_gloo_broadcast(acc_gloo_t *g, void *buf, size_t bytes, int root, char *err,
                                size_t errlen) {
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

acc_result_t acc_gloo_all_gather(acc_gloo_t *g, const void *send, void *recv, size_t bytes,
                                 char *err, size_t errlen) {
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
  return guard(g, "barrier", err, errlen, [&] {
    gloo::BarrierOptions opts(g->ctx);
    opts.setTag(g->next_tag++);
    opts.setTimeout(g->timeout);
    gloo::barrier(opts);
  });
}

} // extern "C"
