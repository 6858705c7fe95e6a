/*
 * acc_gloo_store.cc — gloo::rendezvous::Store over the nbfork store
 * client (see acc_gloo_store.h).
 */
#include "acc_gloo_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace accrt {

GlooStore::GlooStore(acc_store_client_t *client, std::string prefix, int timeout_ms)
    : client_(client), prefix_(std::move(prefix)),
      timeout_ms_(timeout_ms > 0 ? timeout_ms : 300000) {}

/* Gloo's connectFullMesh publishes "rank_N" (host name) and "N" (pair
 * addresses) for every rank N; name the rank a timeout waited for. */
static std::string whose(const std::string &key) {
  std::string k = key.rfind("rank_", 0) == 0 ? key.substr(5) : key;
  if (k.empty() || k.find_first_not_of("0123456789") != std::string::npos)
    return std::string();
  return "rank " + k +
         " did not arrive at the rendezvous in time (not started, crashed "
         "before acc_new, or started with another MASTER_ADDR/MASTER_PORT/WORLD_SIZE/"
         "NBFORK_RUN_ID); ";
}

void GlooStore::fail(acc_result_t r, const char *what, const std::string &key) {
  std::string msg = std::string("rendezvous ") + what + " '" + prefix_ + key +
                    "' failed: " + (r == ACC_ERR_TIMEOUT ? whose(key) : std::string()) +
                    acc_store_client_error(client_);
  throw StoreError(r, msg);
}

void GlooStore::set(const std::string &key, const std::vector<char> &data) {
  std::string k = prefix_ + key;
  acc_result_t r = acc_store_set(client_, k.c_str(), data.data(), data.size());
  if (r != ACC_OK)
    fail(r, "set", key);
}

void GlooStore::note_address(const std::string &key, const char *data, size_t len) {
  if (key.empty() || key.size() > 6 || key.find_first_not_of("0123456789") != std::string::npos ||
      len < sizeof(struct sockaddr_storage))
    return;
  struct sockaddr_storage ss;
  std::memcpy(&ss, data, sizeof ss);
  char ip[INET6_ADDRSTRLEN] = "";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    const auto *a = reinterpret_cast<const struct sockaddr_in *>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto *a = reinterpret_cast<const struct sockaddr_in6 *>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
    port = ntohs(a->sin6_port);
  } else {
    return; /* not the layout this was written for: name no rank */
  }
  size_t rank = std::strtoul(key.c_str(), nullptr, 10);
  if (addrs_.size() <= rank)
    addrs_.resize(rank + 1);
  char text[INET6_ADDRSTRLEN + 16];
  std::snprintf(text, sizeof text, "[%s]:%d", ip, port);
  addrs_[rank] = text;
}

std::vector<char> GlooStore::get(const std::string &key) {
  std::string k = prefix_ + key;
  void *val = nullptr;
  size_t len = 0;
  acc_store_client_set_timeout(client_, timeout_ms_);
  acc_result_t r = acc_store_get(client_, k.c_str(), &val, &len);
  if (r != ACC_OK)
    fail(r, "get", key);
  const char *p = static_cast<const char *>(val);
  note_address(key, p, len);
  std::vector<char> out(p, p + len);
  std::free(val);
  return out;
}

void GlooStore::wait(const std::vector<std::string> &keys) {
  wait(keys, std::chrono::milliseconds(timeout_ms_));
}

void GlooStore::wait(const std::vector<std::string> &keys,
                     const std::chrono::milliseconds &timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto &k : keys)
    full.push_back(prefix_ + k);
  std::vector<const char *> ptrs;
  ptrs.reserve(full.size());
  for (const auto &k : full)
    ptrs.push_back(k.c_str());
  long long t = static_cast<long long>(timeout.count());
  int ms = t <= 0 ? timeout_ms_ : t > 2000000000LL ? 2000000000 : static_cast<int>(t);
  acc_result_t r = acc_store_wait(client_, ptrs.data(), ptrs.size(), ms);
  if (r != ACC_OK)
    fail(r, "wait for", keys.empty() ? std::string() : keys.front());
}

} // namespace accrt
