// How the server reads one HTTP/1.1 request with Beast's parser: the limits it applies (header
// bytes; body bytes decided from Content-Length before the body is read, chunked bodies cut off at
// the limit), which parse failures get an answer (400, 408, 413, 431) and which end the connection
// quietly, and the conversion to the transport-neutral HttpRequest.
//
// http_server.cc reads asynchronously through these functions; the HTTP fuzz target
// (fuzz/http_request_fuzz.cc) feeds bytes synchronously through the same ones, so what is fuzzed
// is what is served. Only those two include this header: it pulls in Beast.
// Must never know about routes, JSON or generation.
#pragma once

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <string>

#include "server/http_server.h"
#include "server/http_types.h"

namespace fg::server {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Before the header is read: the header limit; no body limit yet, so a too-large Content-Length is
// refused after the header with the path known (the error shape depends on it).
void configure_request_parser(RequestParser& parser, const HttpServerConfig& cfg);

// After the header: whether Content-Length already exceeds the body limit (answer 413 without
// reading the body). Otherwise call limit_request_body before reading the body.
bool content_length_too_large(const RequestParser& parser, const HttpServerConfig& cfg);
void limit_request_body(RequestParser& parser, const HttpServerConfig& cfg);

// The request target without its query ("" until the header is parsed).
std::string request_path(const RequestParser& parser);

// A complete request as the routes see it (the parser's message is moved out).
HttpRequest release_request(RequestParser& parser, std::string path);

struct TransportError {
  int status = 0;
  std::string message;
  bool answer = true;  // false: end the connection without a reply (peer gone, idle timeout, shutdown)
};

// What a failed read gets. `ec` is the read's error (boost::beast::error::timeout when the read
// timer fired), `buffered` whether unparsed bytes remain.
TransportError transport_error_for(const boost::system::error_code& ec, const RequestParser& parser, bool buffered,
                                   const HttpServerConfig& cfg);

}  // namespace fg::server
