// HTTPS in the HTTP client against a real TLS server in this process: certificates made
// for the test with the openssl command (a CA, a server certificate for "localhost", and
// an untrusted self-signed one). The client trusts the CA through SSL_CERT_FILE, which
// OpenSSL's default verify paths honour, as a deployment with a private CA would.

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/adapters/http/client.hpp"
#include "core/adapters/http/model_client.hpp"

namespace agentfleet::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using namespace std::chrono_literals;

std::filesystem::path cert_dir() {
  static const std::filesystem::path dir = [] {
    char pattern[] = "/tmp/agentfleet-tls-XXXXXX";
    const char* made = mkdtemp(pattern);
    EXPECT_NE(made, nullptr);
    const std::string d = made ? made : "/tmp";
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string script =
        "cd " + d + " && " + "openssl req -x509 " + ec +
        " -keyout ca.key -out ca.pem -days 2 -subj '/CN=test CA' && " + "openssl req " + ec +
        " -keyout server.key -out server.csr -subj '/CN=localhost' && " +
        "printf 'subjectAltName=DNS:localhost\\n' > ext.cnf && " +
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
        "-out server.pem -days 2 -extfile ext.cnf && " +
        "openssl req -x509 " + ec + " -keyout other.key -out other.pem -days 2 " +
        "-subj '/CN=localhost' -addext subjectAltName=DNS:localhost";
    EXPECT_EQ(std::system((script + " >/dev/null 2>&1").c_str()), 0) << script;
    // Before the client's TLS context exists (it is made on the first HTTPS call).
    setenv("SSL_CERT_FILE", (d + "/ca.pem").c_str(), 1);
    return std::filesystem::path(d);
  }();
  // The keys and certificates go when the test process ends.
  static const struct Cleanup {
    ~Cleanup() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } cleanup;
  return dir;
}

// A TLS server answering every request with 200 and `body` ("ok over tls"); remembers the
// SNI it saw and counts the requests it read (after a handshake the client accepted).
class TlsServer {
 public:
  // `close_notify`: after each answer the server ends the TLS session (close_notify), then
  // closes the connection, as servers do when a kept-alive connection has sat idle.
  explicit TlsServer(const std::string& name, std::string body = "ok over tls",
                     bool close_notify = false)
      : context_(asio::ssl::context::tls_server),
        body_(std::move(body)),
        close_notify_(close_notify) {
    context_.use_certificate_chain_file((cert_dir() / (name + ".pem")).string());
    context_.use_private_key_file((cert_dir() / (name + ".key")).string(), asio::ssl::context::pem);
    acceptor_.open(asio::ip::tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    asio::co_spawn(io_, accept_loop(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~TlsServer() {
    io_.stop();
    thread_.join();
  }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }
  std::string sni() {
    std::lock_guard lock(mutex_);
    return sni_;
  }
  int requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  int closed() {
    std::lock_guard lock(mutex_);
    return closed_;
  }

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      boost::system::error_code ec;
      auto socket = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec)
        co_return;
      asio::co_spawn(io_, serve(std::move(socket)), asio::detached);
    }
  }
  asio::awaitable<void> serve(asio::ip::tcp::socket socket) {
    beast::ssl_stream<beast::tcp_stream> stream(std::move(socket), context_);
    beast::get_lowest_layer(stream).expires_after(10s);
    boost::system::error_code ec;
    co_await stream.async_handshake(asio::ssl::stream_base::server,
                                    asio::redirect_error(asio::use_awaitable, ec));
    if (ec)
      co_return;  // the client refused us: that is what some tests expect
    if (const char* name = SSL_get_servername(stream.native_handle(), TLSEXT_NAMETYPE_host_name)) {
      std::lock_guard lock(mutex_);
      sni_ = name;
    }
    beast::flat_buffer buffer;
    beast::http::request<beast::http::string_body> request;
    co_await beast::http::async_read(stream, buffer, request,
                                     asio::redirect_error(asio::use_awaitable, ec));
    if (ec)
      co_return;
    {
      std::lock_guard lock(mutex_);
      ++requests_;
    }
    beast::http::response<beast::http::string_body> response{beast::http::status::ok, 11};
    response.set(beast::http::field::content_type, "application/json");
    response.body() = body_;
    response.prepare_payload();
    co_await beast::http::async_write(stream, response,
                                      asio::redirect_error(asio::use_awaitable, ec));
    if (close_notify_) {
      // The connection sits idle a moment (the client has read the whole answer), then
      // close_notify goes out; the wait for the client's own is cut short, and the
      // connection closed.
      asio::steady_timer idle(co_await asio::this_coro::executor, 100ms);
      co_await idle.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      beast::get_lowest_layer(stream).expires_after(50ms);
      co_await stream.async_shutdown(asio::redirect_error(asio::use_awaitable, ec));
      beast::get_lowest_layer(stream).socket().close(ec);
      std::lock_guard lock(mutex_);
      ++closed_;
    }
  }

  asio::io_context io_;
  asio::ssl::context context_;
  asio::ip::tcp::acceptor acceptor_{io_};
  std::thread thread_;
  std::mutex mutex_;
  std::string sni_;
  std::string body_;
  bool close_notify_ = false;
  int requests_ = 0;
  int closed_ = 0;
};

// A pool's connections belong to the io_context that opened them: pass the one the pool
// is used with.
ClientResponse get(const std::string& url, ConnectionPool* pool = nullptr,
                   asio::io_context* shared_io = nullptr,
                   beast::http::verb method = beast::http::verb::get) {
  asio::io_context own_io;
  asio::io_context& io = shared_io ? *shared_io : own_io;
  io.restart();
  ClientRequest request;
  request.method = method;
  request.url = url;
  if (method == beast::http::verb::post)
    request.body = "{}";
  request.deadline = std::chrono::steady_clock::now() + 10s;
  auto future =
      asio::co_spawn(io, fetch(io.get_executor(), std::move(request), pool), asio::use_future);
  io.run();
  return future.get();
}

TEST(HttpsClient, TrustedCertificateForTheHostWorksAndSendsSni) {
  cert_dir();
  TlsServer server("server");
  auto response = get("https://localhost:" + std::to_string(server.port()) + "/v1/x");
  ASSERT_TRUE(response.ok()) << response.error_message;
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, "ok over tls");
  EXPECT_EQ(server.sni(), "localhost");
}

TEST(HttpsClient, APooledConnectionTheServerClosedIsReplaced) {
  cert_dir();
  TlsServer server("server");  // closes each connection after one answer
  asio::io_context io;
  ConnectionPool pool;
  const std::string url = "https://localhost:" + std::to_string(server.port()) + "/v1/x";
  for (int i = 0; i < 3; ++i) {
    auto response = get(url, &pool, &io);
    ASSERT_TRUE(response.ok()) << i << ": " << response.error_message;
    EXPECT_EQ(response.body, "ok over tls");
  }
  EXPECT_EQ(pool.stats().opened, 3u);
}

TEST(HttpsClient, APostNeverMeetsAPooledConnectionTheServerEndedWithCloseNotify) {
  // A model call (POST) is never sent twice, so it must not be written to a connection the
  // server has already ended: the close_notify pending before the FIN must not pass it for
  // alive.
  cert_dir();
  TlsServer server("server", "ok over tls", /*close_notify=*/true);
  asio::io_context io;
  ConnectionPool pool;
  const std::string url = "https://localhost:" + std::to_string(server.port()) + "/v1/x";
  for (int i = 0; i < 3; ++i) {
    auto response = get(url, &pool, &io, beast::http::verb::post);
    ASSERT_TRUE(response.ok()) << i << ": " << response.error_message;
    EXPECT_EQ(response.body, "ok over tls");
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (server.closed() < i + 1 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);  // polling a bounded wait for the server's close
    ASSERT_EQ(server.closed(), i + 1);
  }
  EXPECT_EQ(pool.stats().opened, 3u);
  EXPECT_EQ(pool.stats().stale_retries, 0u);
  EXPECT_EQ(server.requests(), 3);
}

TEST(HttpsClient, ACertificateForAnotherNameIsRefused) {
  cert_dir();
  TlsServer server("server");  // names localhost only, not 127.0.0.1
  auto response = get("https://127.0.0.1:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(response.error, ClientErrorKind::kTls) << response.error_message;
}

TEST(HttpsClient, AnUntrustedCertificateIsRefused) {
  cert_dir();
  TlsServer server("other");  // self-signed, not issued by the trusted CA
  auto response = get("https://localhost:" + std::to_string(server.port()) + "/");
  EXPECT_EQ(response.error, ClientErrorKind::kTls) << response.error_message;
}

// The model client on the same TLS stack (verification on, no option to turn it off): an
// endpoint with a self-signed certificate is refused at the handshake, not retried, and no
// request reaches it; the same endpoint is accepted once its certificate is issued by a CA
// the deployment trusts (configured as the system trust store is: SSL_CERT_FILE or
// SSL_CERT_DIR, which cert_dir() points at the test's CA).
TEST(HttpsClient, AModelEndpointWithASelfSignedCertificateIsRefusedAndATrustedOneAnswers) {
  cert_dir();
  const std::string completion =
      R"({"id":"c-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,)"
      R"("message":{"role":"assistant","content":"hello over tls"},"finish_reason":"stop"}],)"
      R"("usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}})";
  TlsServer self_signed("other", completion);
  TlsServer trusted("server", completion);
  struct Asked {
    Result<ModelReply> reply;
    std::vector<ModelOutcome> attempts;
  };
  auto ask = [&](unsigned short port) {
    config::ModelConfig model;
    model.name = "m";
    model.max_retries = 3;
    model.retry.base_ms = 1;
    model.retry.max_ms = 5;
    config::ModelEndpoint endpoint;
    endpoint.name = "tls";
    endpoint.url = "https://localhost:" + std::to_string(port) + "/v1/chat/completions";
    endpoint.api_key = "sk-test";
    model.endpoints.push_back(endpoint);
    asio::io_context io;
    OpenAiModelClient client(io.get_executor(), {model});
    std::vector<ModelOutcome> attempts;
    client.set_observer([&](const ModelAttempt& a) { attempts.push_back(a.outcome); });
    std::vector<Message> messages{Message{Role::kUser, "hello", {}, {}, {}}};
    std::vector<ports::ToolSchema> tools;
    ports::ModelRequest request;
    request.model = "m";
    request.messages = &messages;
    request.tools = &tools;
    request.deadline = std::chrono::steady_clock::now() + 10s;
    auto future = asio::co_spawn(io, client.complete(std::move(request)), asio::use_future);
    io.run();
    return Asked{future.get(), attempts};
  };

  const Asked refused = ask(self_signed.port());
  ASSERT_FALSE(refused.reply.ok());
  EXPECT_NE(refused.reply.error().message.find("TLS"), std::string::npos)
      << refused.reply.error().message;
  EXPECT_EQ(refused.attempts, std::vector<ModelOutcome>{ModelOutcome::kConnectError})
      << "one attempt: a certificate that is not trusted is not tried again";
  EXPECT_EQ(self_signed.requests(), 0) << "the request (and its API key) reached the endpoint";

  const Asked answered = ask(trusted.port());
  ASSERT_TRUE(answered.reply.ok()) << answered.reply.error().message;
  EXPECT_EQ(answered.reply.value().content, "hello over tls");
  EXPECT_EQ(trusted.requests(), 1);
}

TEST(HttpsClient, PlainHttpToATlsPortFailsWithinTheDeadline) {
  cert_dir();
  TlsServer server("server");
  const auto started = std::chrono::steady_clock::now();
  auto response = get("http://localhost:" + std::to_string(server.port()) + "/");
  EXPECT_FALSE(response.ok() && response.status == 200);
  EXPECT_LT(std::chrono::steady_clock::now() - started, 11s);
}

}  // namespace
}  // namespace agentfleet::http
