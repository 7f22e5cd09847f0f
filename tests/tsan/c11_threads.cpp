// For the ThreadSanitizer build only (AGENTFLEET_TSAN): glibc's C11 <threads.h> functions,
// routed through the pthread functions that ThreadSanitizer intercepts.
//
// librdkafka (Debian's 2.0.2) creates its threads and takes its locks with thrd_create,
// mtx_lock, cnd_wait and call_once. glibc implements those by calling its internal
// __pthread_* functions directly, past the pthread_* symbols ThreadSanitizer replaces, and
// GCC 12's libtsan intercepts none of the C11 functions (LLVM's runtime learned them
// later). A librdkafka thread therefore starts without ThreadSanitizer's per-thread state
// and the process crashes in its first malloc ("ThreadSanitizer:DEADLYSIGNAL"); its locks,
// were it to get that far, would be invisible and every hand-over through them a false
// race. Definitions in the executable take precedence over glibc's for librdkafka's
// references (the dynamic linker accepts an unversioned definition for a versioned
// reference), so these make its threads and locks ordinary, intercepted pthreads.
//
// glibc defines thrd_t as pthread_t, and mtx_t, cnd_t and once_flag with the size and
// layout of pthread_mutex_t, pthread_cond_t and pthread_once_t (its own implementation
// casts between them); the C11 types are not named here, so <threads.h> is not needed.
//
// A lock or condition that librdkafka creates on one thread and hands to another reaches
// it through librdkafka's own reference counts, atomic instructions ThreadSanitizer does not
// see in an uninstrumented library; it then reports the other thread's first
// pthread_mutex_lock as racing with pthread_mutex_init (seen in a worker: a broker thread
// made the lock, the io thread's produce took it). Every use of a lock or condition
// happens after its initialization in any correct program, so init releases the object's
// address and every later operation (destroy included) acquires it first: the annotation
// states that ordering and nothing more. Our own code uses no C11 locks.

#include <pthread.h>
#include <sanitizer/tsan_interface.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <ctime>

namespace {

// The C11 result codes (glibc's values).
enum : int { kSuccess = 0, kBusy = 1, kError = 2, kNoMem = 3, kTimedOut = 4 };

int from_errno(int error) {
  switch (error) {
    case 0:
      return kSuccess;
    case EBUSY:
      return kBusy;
    case ENOMEM:
      return kNoMem;
    case ETIMEDOUT:
      return kTimedOut;
    default:
      return kError;
  }
}

struct Start {
  int (*function)(void*);
  void* argument;
};

void* run_c11_thread(void* start_ptr) {
  const Start start = *static_cast<Start*>(start_ptr);
  std::free(start_ptr);
  return reinterpret_cast<void*>(static_cast<std::intptr_t>(start.function(start.argument)));
}

}  // namespace

extern "C" {

int thrd_create(pthread_t* thread, int (*function)(void*), void* argument) {
  auto* start = static_cast<Start*>(std::malloc(sizeof(Start)));
  if (start == nullptr)
    return kNoMem;
  *start = Start{function, argument};
  const int error = pthread_create(thread, nullptr, run_c11_thread, start);
  if (error != 0)
    std::free(start);
  return from_errno(error);
}

int thrd_join(pthread_t thread, int* result) {
  void* value = nullptr;
  const int error = pthread_join(thread, &value);
  if (error == 0 && result != nullptr)
    *result = static_cast<int>(reinterpret_cast<std::intptr_t>(value));
  return from_errno(error);
}

int thrd_detach(pthread_t thread) {
  return from_errno(pthread_detach(thread));
}

// mtx_plain 0, mtx_recursive 1, mtx_timed 2 (glibc's values).
int mtx_init(pthread_mutex_t* mutex, int type) {
  pthread_mutexattr_t attributes;
  pthread_mutexattr_init(&attributes);
  pthread_mutexattr_settype(&attributes,
                            (type & 1) != 0 ? PTHREAD_MUTEX_RECURSIVE : PTHREAD_MUTEX_DEFAULT);
  const int error = pthread_mutex_init(mutex, &attributes);
  pthread_mutexattr_destroy(&attributes);
  __tsan_release(mutex);
  return from_errno(error);
}

int mtx_lock(pthread_mutex_t* mutex) {
  __tsan_acquire(mutex);
  return from_errno(pthread_mutex_lock(mutex));
}

int mtx_trylock(pthread_mutex_t* mutex) {
  __tsan_acquire(mutex);
  return from_errno(pthread_mutex_trylock(mutex));
}

int mtx_timedlock(pthread_mutex_t* mutex, const struct timespec* until) {
  __tsan_acquire(mutex);
  return from_errno(pthread_mutex_timedlock(mutex, until));
}

int mtx_unlock(pthread_mutex_t* mutex) {
  return from_errno(pthread_mutex_unlock(mutex));
}

void mtx_destroy(pthread_mutex_t* mutex) {
  __tsan_acquire(mutex);
  pthread_mutex_destroy(mutex);
}

int cnd_init(pthread_cond_t* condition) {
  const int error = pthread_cond_init(condition, nullptr);
  __tsan_release(condition);
  return from_errno(error);
}

int cnd_signal(pthread_cond_t* condition) {
  __tsan_acquire(condition);
  return from_errno(pthread_cond_signal(condition));
}

int cnd_broadcast(pthread_cond_t* condition) {
  __tsan_acquire(condition);
  return from_errno(pthread_cond_broadcast(condition));
}

int cnd_wait(pthread_cond_t* condition, pthread_mutex_t* mutex) {
  __tsan_acquire(condition);
  return from_errno(pthread_cond_wait(condition, mutex));
}

// `until` is on the TIME_UTC clock, which is CLOCK_REALTIME, the condition's default.
int cnd_timedwait(pthread_cond_t* condition, pthread_mutex_t* mutex, const struct timespec* until) {
  __tsan_acquire(condition);
  return from_errno(pthread_cond_timedwait(condition, mutex, until));
}

void cnd_destroy(pthread_cond_t* condition) {
  __tsan_acquire(condition);
  pthread_cond_destroy(condition);
}

void call_once(pthread_once_t* flag, void (*function)()) {
  pthread_once(flag, function);
}

}  // extern "C"
