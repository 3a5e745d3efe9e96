import Dispatch
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Which context the current thread is executing for: a thread-local marker set while an
/// update context runs a block, so every property access can check confinement cheaply.
enum Execution {
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

    /// True while the current thread runs work of the main queue, where the main actor runs
    /// (on Linux, an async `main` has a worker thread drain it).
    static var isOnMainQueue: Bool { DispatchQueue.getSpecific(key: mainQueueKey) == true }

    /// True while the current thread runs a block of `context`.
    static func isRunning(_ context: AnyObject) -> Bool {
        let running: UnsafeMutableRawPointer? = pthread_getspecific(key)
        return running == Unmanaged.passUnretained(context).toOpaque()
    }

    /// The update context the current thread runs a block of, if any.
    static func current() -> ObjectContext? {
        let running: UnsafeMutableRawPointer? = pthread_getspecific(key)
        // Set only by `run(as:)` with an ObjectContext, alive while its block runs.
        return running.map { Unmanaged<ObjectContext>.fromOpaque($0).takeUnretainedValue() }
    }

    /// Runs `body` marked as executing for `context`, restoring the previous marker after.
    static func run<T>(as context: ObjectContext, _ body: () throws -> T) rethrows -> T {
        let previous = pthread_getspecific(key)
        pthread_setspecific(key, Unmanaged.passUnretained(context).toOpaque())
        defer { pthread_setspecific(key, previous) }
        return try body()
    }
}
