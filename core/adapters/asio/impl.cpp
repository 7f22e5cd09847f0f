// The compiled part of Boost.Asio, its SSL layer and Boost.Beast, built once here instead
// of in every translation unit that includes them: the whole tree is compiled with
// BOOST_ASIO_SEPARATE_COMPILATION and BOOST_BEAST_SEPARATE_COMPILATION (CMakeLists.txt),
// which turns their non-template functions (the scheduler, the reactor, socket operations,
// the HTTP parser's tables, error categories) from inline definitions into declarations
// that this file defines. Each including file then compiles 12-20% faster (docs/testing.md).
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
