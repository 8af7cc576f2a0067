// Fuzz target: the HTTP/1.1 request parser and everything behind it. Raw bytes go through the
// server's own parsing steps (server/http_request_parser.h: Beast's parser with the server's
// header and body limits, the 413/431/400 decisions, the conversion to HttpRequest), then, for a
// complete request, through ApiServer::handle with a synchronous backend; pipelined requests in
// the same input are served in turn, as on a keep-alive connection.
// Seeds: fuzz/corpus/http_request (GET/POST of every route, chunked bodies, Expect, pipelining,
// oversized and malformed heads); dictionary: fuzz/dict/http.dict.
#include <boost/asio/buffer.hpp>
#include <memory>
#include <string_view>

#include "api_driver.h"
#include "fuzz_util.h"
#include "server/http_request_parser.h"
#include "sync_backend.h"

namespace {

namespace http = boost::beast::http;
using fg::server::RequestParser;

struct Target {
  fg::fuzz::SyncBackend backend;
  std::unique_ptr<fg::server::ApiServer> api;
  fg::server::HttpServerConfig cfg;
  Target() {
    fg::server::ApiServerConfig c;
    c.log_requests = false;
    c.api_key = "sk-fuzz";
    api = std::make_unique<fg::server::ApiServer>(backend, c);
    // Small limits so the fuzzer reaches them.
    cfg.max_body_bytes = 4096;
    cfg.max_header_bytes = 1024;
  }
};

// Feeds `bytes` to the parser; returns how many were consumed. Stops once the header is done
// unless the parser is eager, as http::async_read_header does: the server judges Content-Length
// before the body's reader is made (which reserves that many bytes).
size_t put_all(RequestParser& parser, std::string_view bytes, boost::system::error_code& ec) {
  size_t used = 0;
  const bool header_only = !parser.is_header_done() && !parser.eager();
  while (!parser.is_done() && used < bytes.size() && !(header_only && parser.is_header_done())) {
    const size_t n = parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == http::error::need_more) {
      ec = {};
      break;
    }
    if (ec || n == 0) break;
  }
  return used;
}

// One request from the front of `bytes`, as Session::serve_one reads it. Returns false when the
// connection ends here (an answer was checked, or the bytes ran out).
bool serve_one(Target& t, std::string_view& bytes) {
  RequestParser parser;
  fg::server::configure_request_parser(parser, t.cfg);
  boost::system::error_code ec;
  size_t used = put_all(parser, bytes, ec);  // stops after the header (the parser is not eager)
  // A header the bytes never complete (all used, or the parser took none of the rest): the
  // server would wait for more, then time out; here the connection ends.
  if (!ec && !parser.is_header_done()) ec = http::error::end_of_stream;
  if (!ec && fg::server::content_length_too_large(parser, t.cfg)) ec = http::error::body_limit;
  if (!ec && !parser.is_done()) {
    fg::server::limit_request_body(parser, t.cfg);
    parser.eager(true);
    used += put_all(parser, bytes.substr(used), ec);
    if (!ec && !parser.is_done()) parser.put_eof(ec);
  }
  bytes.remove_prefix(used);
  const std::string path = fg::server::request_path(parser);
  if (ec) {
    const fg::server::TransportError te = fg::server::transport_error_for(ec, parser, !bytes.empty(), t.cfg);
    if (te.answer) {
      FG_FUZZ_CHECK(te.status == 400 || te.status == 408 || te.status == 413 || te.status == 431);
      const fg::server::HttpResponse r = t.api->transport_error(te.status, te.message, path);
      FG_FUZZ_CHECK(r.status == te.status && nlohmann::json::accept(r.body));
    }
    return false;
  }
  const bool keep_alive = parser.get().keep_alive();
  fg::fuzz::run_api_request(*t.api, fg::server::release_request(parser, path));
  return keep_alive && !bytes.empty();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fg::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Target t;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 4 && serve_one(t, bytes); ++i) {
  }
  return 0;
}
