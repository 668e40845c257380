// Clang's thread-safety annotations (clang.llvm.org/docs/ThreadSafetyAnalysis
// .html), under the project's prefix. With Clang and -Wthread-safety the
// compiler checks that each member is used only with what protects it held;
// with other compilers the macros are empty. The test command builds the
// library with Clang and -Wthread-safety -Werror.
#ifndef RUNSTORE_UTIL_THREAD_ANNOTATIONS_H_
#define RUNSTORE_UTIL_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define RUNSTORE_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define RUNSTORE_THREAD_ANNOTATION_(x)
#endif

// A class whose objects are capabilities: a mutex, or a role a thread takes.
#define RUNSTORE_CAPABILITY(x) RUNSTORE_THREAD_ANNOTATION_(capability(x))
// An RAII class that holds a capability for its lifetime.
#define RUNSTORE_SCOPED_CAPABILITY RUNSTORE_THREAD_ANNOTATION_(scoped_lockable)
// A member that may be used only with the capability held.
#define RUNSTORE_GUARDED_BY(x) RUNSTORE_THREAD_ANNOTATION_(guarded_by(x))
// A pointer member whose pointee may be used only with the capability held.
#define RUNSTORE_PT_GUARDED_BY(x) RUNSTORE_THREAD_ANNOTATION_(pt_guarded_by(x))
// A function its callers must call with the capabilities held.
#define RUNSTORE_REQUIRES(...) RUNSTORE_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
// A function its callers must call without the capabilities.
#define RUNSTORE_EXCLUDES(...) RUNSTORE_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
// A function that takes (or gives back) the capabilities.
#define RUNSTORE_ACQUIRE(...) RUNSTORE_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
#define RUNSTORE_RELEASE(...) RUNSTORE_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
// A function that takes the capabilities when it returns `result`.
#define RUNSTORE_TRY_ACQUIRE(...) RUNSTORE_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
// A function that returns the capability guarding what it returns.
#define RUNSTORE_RETURN_CAPABILITY(x) RUNSTORE_THREAD_ANNOTATION_(lock_returned(x))
// Asserts, to the analysis, that the capability is held.
#define RUNSTORE_ASSERT_CAPABILITY(x) RUNSTORE_THREAD_ANNOTATION_(assert_capability(x))
// A function the analysis does not check (say why where it is used).
#define RUNSTORE_NO_THREAD_SAFETY_ANALYSIS RUNSTORE_THREAD_ANNOTATION_(no_thread_safety_analysis)

#endif  // RUNSTORE_UTIL_THREAD_ANNOTATIONS_H_
