import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import _ContextStackCore

/// Which context the current thread is executing for: a thread-local marker set while an
/// update context runs a block, so every property access can check confinement cheaply.
package enum Execution {
    // Created once, never changed.
    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    private static let mainQueueKey: DispatchSpecificKey<Bool> = {
        let key = DispatchSpecificKey<Bool>()
        DispatchQueue.main.setSpecific(key: key, value: true)
        return key
    }()

    // Created once, never changed: per thread, whether it is the main thread.
    private static let mainThreadKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// True on the process's main thread. Foundation's `Thread.isMainThread` makes system calls
    /// on Linux (getpid, gettid) — on every property access of a main-context object, a
    /// twentieth of walking a million objects — so each thread asks it once and keeps the
    /// answer in a thread-local slot.
    package static var isMainThread: Bool {
        if let known = pthread_getspecific(mainThreadKey) {
            return UInt(bitPattern: known) == 1
        }
        let isMain = Thread.isMainThread
        pthread_setspecific(mainThreadKey, UnsafeRawPointer(bitPattern: isMain ? 1 : 2))
        return isMain
    }

    /// True while the current thread runs work of the main queue, where the main actor runs
    /// (on Linux, an async `main` has a worker thread drain it).
    package static var isOnMainQueue: Bool { DispatchQueue.getSpecific(key: mainQueueKey) == true }

    // Created once, never changed: set while a writer thread tells `onError` of a failed save.
    private static let reportingKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// True while the current thread is a writer telling `onError` of a save that failed, in
    /// the middle of its turn: a wait for writes there would wait for itself.
    package static var isReportingWriteFailure: Bool { pthread_getspecific(reportingKey) != nil }

    /// Runs `body` — the writer's call of `onError` — marked as such (`isReportingWriteFailure`).
    package static func reportingWriteFailure(_ body: () -> Void) {
        pthread_setspecific(reportingKey, UnsafeRawPointer(bitPattern: 1))
        defer { pthread_setspecific(reportingKey, nil) }
        body()
    }

    /// True while the current thread runs a block of `context`.
    package static func isRunning(_ context: AnyObject) -> Bool {
        let running: UnsafeMutableRawPointer? = pthread_getspecific(key)
        return running == Unmanaged.passUnretained(context).toOpaque()
    }

    /// The update context the current thread runs a block of, if any.
    package static func current() -> ContextCore? {
        let running: UnsafeMutableRawPointer? = pthread_getspecific(key)
        // Set only by `run(as:)` with an ContextCore, alive while its block runs.
        return running.map { Unmanaged<ContextCore>.fromOpaque($0).takeUnretainedValue() }
    }

    /// Runs `body` marked as executing for `context`, restoring the previous marker after.
    package static func run<T>(as context: ContextCore, _ body: () throws -> T) rethrows -> T {
        let previous = pthread_getspecific(key)
        pthread_setspecific(key, Unmanaged.passUnretained(context).toOpaque())
        defer { pthread_setspecific(key, previous) }
        return try body()
    }
}
