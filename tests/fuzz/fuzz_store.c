/*
 * fuzz_store — the rendezvous store's request decoder and its handling
 * (runtime/store/acc_store_server.c: serve_one, handle, the entry and waiter
 * tables), driven byte for byte as the serving thread drives it.
 *
 * The server file is compiled into this harness, so its static decoder
 * runs unchanged: its ROUTER is bound in-process (inproc://), a DEALER in
 * this thread sends each request, serve_one decodes it, and the replies
 * are drained. The store starts empty for each input.
 *
 * Input: requests separated by '\n', each request's frames separated by
 * '\t' (a well-formed one is `OP\tKEY\tVALUE`; any count of frames and
 * any bytes are sent as they are).
 */

#include "fuzz_util.h" /* first: it sets _GNU_SOURCE */
#include "../../runtime/store/acc_store_server.c"

#define MAX_REQUESTS 256
#define MAX_FRAMES 16

static void *ctx, *router, *dealer;

static void setup(void) {
  ctx = zmq_ctx_new();
  router = zmq_socket(ctx, ZMQ_ROUTER);
  dealer = zmq_socket(ctx, ZMQ_DEALER);
  if (!ctx || !router || !dealer || zmq_bind(router, "inproc://fuzz-store") != 0 ||
      zmq_connect(dealer, "inproc://fuzz-store") != 0)
    abort();
}

/* Serve what arrived, then read every reply: [status, value] each. */
static void pump(acc_store_server_t *s) {
  zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
  while (zmq_poll(&it, 1, 0) > 0 && (it.revents & ZMQ_POLLIN))
    serve_one(s);
  zmq_msg_t m;
  zmq_msg_init(&m);
  while (zmq_msg_recv(&m, dealer, ZMQ_DONTWAIT) >= 0) {
  }
  zmq_msg_close(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!ctx)
    setup();
  acc_store_server_t s = {0};
  s.router = router;
  fz_span_t req[MAX_REQUESTS];
  size_t nreq = fz_split(data, size, '\n', req, MAX_REQUESTS);
  for (size_t r = 0; r < nreq; r++) {
    fz_span_t f[MAX_FRAMES];
    size_t nf = fz_split(req[r].data, req[r].len, '\t', f, MAX_FRAMES);
    for (size_t i = 0; i < nf; i++)
      if (zmq_send(dealer, f[i].data, f[i].len, ZMQ_DONTWAIT | (i + 1 < nf ? ZMQ_SNDMORE : 0)) <
          0)
        abort();
    pump(&s);
    for (size_t i = 0; i < s.nwaiters; i++) /* held requests name keys */
      if (!s.waiters[i].key || s.waiters[i].idlen > STORE_MAX_ID)
        abort();
  }
  free_state(&s);
  return 0;
}
