/*
 * acc_gloo_store.h — a gloo::rendezvous::Store on top of the nbfork
 * rendezvous store client (acc_store.h), so Gloo's connectFullMesh
 * exchanges pair addresses through our ZeroMQ store. C++ only; internal.
 *
 * Every key is prefixed with `prefix` (the runtime passes
 * "<NBFORK_RUN_ID>/<generation>/gloo/"), so runs that share a store, and
 * successive process groups of one run, never read each other's keys.
 * Failures throw accrt::accrt::StoreError (a gloo::IoException) carrying the
 * acc_result_t, so the shim maps them back to ACC_ERR_TIMEOUT/STORE.
 */
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>

#include "acc_store.h"

namespace accrt {

struct StoreError : public ::gloo::IoException {
  StoreError(acc_result_t code, const std::string &msg) : ::gloo::IoException(msg), code(code) {}
  acc_result_t code;
};

class GlooStore : public ::gloo::rendezvous::Store {
public:
  // `client` is borrowed (the caller keeps it alive longer than this).
  GlooStore(acc_store_client_t *client, std::string prefix, int timeout_ms);
  ~GlooStore() override = default;

  void set(const std::string &key, const std::vector<char> &data) override;
  // Blocks until the key exists or the timeout.
  std::vector<char> get(const std::string &key) override;
  void wait(const std::vector<std::string> &keys) override;
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override;

  // Each rank's listening address as Gloo's messages write it
  // ("[IP]:PORT"), read from the pair addresses that connectFullMesh
  // fetched (key "N", a tcp::Address whose first bytes are a
  // sockaddr_storage); "" for ranks not seen. Lets the shim name the
  // rank whose connection an I/O error names.
  const std::vector<std::string> &addresses() const { return addrs_; }

private:
  [[noreturn]] void fail(acc_result_t r, const char *what, const std::string &key);
  void note_address(const std::string &key, const char *data, size_t len);
  std::vector<std::string> addrs_;
  acc_store_client_t *client_;
  std::string prefix_;
  int timeout_ms_;
};

} // namespace accrt
