import Synchronization
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// The turn of `.serial` updates: one update at a time per starting context, first come,
/// first served. An update holds the turn while its block or a continuation it scheduled is
/// running or queued — never longer, so a leaked `Update` cannot wedge the line.
final class SerialGate: Sendable {
    private struct State {
        var isTaken = false
        var line: [@Sendable () -> Void] = []
    }

    private let state = Locked(State())

    /// Calls `start` once the turn is this caller's (at once when it is free).
    func acquire(_ start: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.isTaken {
                state.line.append(start)
                return false
            }
            state.isTaken = true
            return true
        }
        if now { start() }
    }

    /// Passes the turn to the next in line, or frees it.
    func release() {
        let next = state.withLock { state -> (@Sendable () -> Void)? in
            if state.line.isEmpty {
                state.isTaken = false
                return nil
            }
            return state.line.removeFirst()
        }
        next?()
    }
}
