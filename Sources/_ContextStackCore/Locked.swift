import Foundation

/// A value that is only touched under a lock. All shared mutable state of the library lives in
/// one of these.
///
/// It wraps `NSLock` (a pthread mutex) rather than `Synchronization.Mutex`: the thread
/// sanitizer understands pthread mutexes, while Mutex's futex-based lock on Linux makes it
/// report every access it guards as a race — and a sanitizer run that cries wolf finds nothing.
/// It also holds state that is not `Sendable` (SQLite connections), which Mutex's `sending`
/// rules would not accept.
package final class Locked<State>: @unchecked Sendable {
    // @unchecked: `state` is read and written only inside `withLock`, under `lock`.
    // Inlinable, so that every layer's `withLock` is specialized and inlined where it is used
    // rather than called through generic metadata across the module boundary.
    @usableFromInline let lock = NSLock()
    // Unchecked by Swift's run-time exclusivity enforcement: the lock already makes each
    // access exclusive (a nested `withLock` on one value would deadlock before any check
    // could report it), and the check cost every `withLock` a look-up in the thread's access
    // set, nine of them a small query.
    @exclusivity(unchecked) @usableFromInline var state: State

    package init(_ state: State) { self.state = state }

    @inlinable
    package func withLock<T>(_ body: (inout State) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }

    /// Runs `body` under the lock if no thread holds it (this one included); `nil` at once,
    /// without waiting, if one does.
    @inlinable
    package func withLockIfAvailable<T>(_ body: (inout State) throws -> T) rethrows -> T? {
        guard lock.try() else { return nil }
        defer { lock.unlock() }
        return try body(&state)
    }
}
