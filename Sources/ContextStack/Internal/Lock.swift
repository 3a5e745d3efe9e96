import Foundation

/// A value that is only touched under a lock: for state that is not `Sendable` (SQLite
/// connections), where `Mutex`'s `sending` rules get in the way.
final class Locked<State>: @unchecked Sendable {
    // @unchecked: `state` is read and written only inside `withLock`, under `lock`.
    private let lock = NSLock()
    private var state: State

    init(_ state: State) { self.state = state }

    func withLock<T>(_ body: (inout State) throws -> T) rethrows -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&state)
    }
}
