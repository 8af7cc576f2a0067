// Reading one request with Beast's parser (see http_request_parser.h).
#include "server/http_request_parser.h"

#include <algorithm>
#include <boost/asio/error.hpp>
#include <cstdint>
#include <limits>
#include <string_view>

namespace fg::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

void configure_request_parser(RequestParser& parser, const HttpServerConfig& cfg) {
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  parser.header_limit(static_cast<std::uint32_t>(std::min<size_t>(cfg.max_header_bytes, UINT32_MAX)));
}

bool content_length_too_large(const RequestParser& parser, const HttpServerConfig& cfg) {
  // Before the header is complete there is no Content-Length to judge (Beast asserts on asking).
  return parser.is_header_done() && parser.content_length() && *parser.content_length() > cfg.max_body_bytes;
}

void limit_request_body(RequestParser& parser, const HttpServerConfig& cfg) {
  parser.body_limit(cfg.max_body_bytes);
}

std::string request_path(const RequestParser& parser) {
  if (!parser.is_header_done()) return {};
  auto t = parser.get().target();
  std::string_view target(t.data(), t.size());
  return std::string(target.substr(0, target.find('?')));
}

HttpRequest release_request(RequestParser& parser, std::string path) {
  auto msg = parser.release();
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = std::move(path);
  req.content_type = std::string(msg[http::field::content_type]);
  req.authorization = std::string(msg[http::field::authorization]);
  req.body = std::move(msg.body());
  return req;
}

TransportError transport_error_for(const boost::system::error_code& ec, const RequestParser& parser, bool buffered,
                                   const HttpServerConfig& cfg) {
  TransportError e;
  if (ec == http::error::body_limit) {
    e.status = 413;
    e.message = "Request body is larger than the server's limit of " + std::to_string(cfg.max_body_bytes) +
                " bytes (--max-body-bytes).";
    return e;
  }
  if (ec == http::error::header_limit) {
    e.status = 431;
    e.message = "Request headers are larger than the server's limit of " + std::to_string(cfg.max_header_bytes) +
                " bytes (--max-header-bytes).";
    return e;
  }
  // Quiet ends: the peer closed, the idle/read timeout fired on an idle connection, or shutdown
  // closed us.
  const bool quiet = ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
                     ec == net::error::operation_aborted || ec == net::error::connection_reset ||
                     (!buffered && !parser.got_some());
  if (!quiet && ec.category() == http::make_error_code(http::error::bad_version).category()) {
    e.status = 400;
    e.message = "Malformed HTTP request: " + ec.message() + ".";
    return e;
  }
  if (ec == beast::error::timeout && parser.got_some()) {
    e.status = 408;
    e.message =
        "The request was not received within " + std::to_string(int(cfg.read_timeout_s)) + " seconds (--read-timeout).";
    return e;
  }
  e.answer = false;
  return e;
}

}  // namespace fg::server
