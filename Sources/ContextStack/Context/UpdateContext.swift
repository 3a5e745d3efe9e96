import Dispatch
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// A context that changes objects: it hands an `Update` to the blocks you give it, and its
/// `commit()` saves into its target (the main context in the three-tier stack).
///
/// `beginUpdate` and `beginUpdateAndWait` make a fresh one for each update; a long-lived one
/// from `beginUpdateContext()` accumulates changes across its `perform` blocks until a commit.
/// Blocks of one update context run one at a time, on its own queue (or, for the `AndWait`
/// forms, on the calling thread while the queue is held). The context lives as long as a
/// block, a scheduled continuation or an `Update` handle does; then what it did not commit is
/// dropped.
public final class UpdateContext: Sendable {
    let core: ContextCore
    let starter: UpdateStarter
    private let queue = DispatchQueue(label: "ContextStack.UpdateContext")
    private let state = Locked(State())

    private struct State {
        /// While a `transaction`'s block runs (`claimingSaves`), the sequence numbers of the
        /// commits it made: their save errors are the caller's, who waits for them, and reach
        /// no one else. `nil` otherwise.
        var claimed: [UInt64]?
        /// Blocks queued or running; under `.serial` the update holds its turn while this is > 0.
        var activeBlocks = 0
        var turn = Turn.idle
    }

    /// What a block does to start: run now, ask for the turn, or wait behind blocks already
    /// waiting for it.
    private enum Start {
        case now, acquire, queued
    }

    /// Where a `.serial` update stands in its context's line.
    private enum Turn {
        case idle
        /// Waiting for the turn, with the blocks to start once it comes, in order.
        case waiting([@Sendable () -> Void])
        case held
    }

    init(starter: UpdateStarter) {
        self.core = ContextCore(kind: .update, host: starter.stack)
        self.core.starter = ObjectIdentifier(starter)
        self.starter = starter
    }

    /// Runs `body` (a `transaction`'s block and its commit) with the commits it makes claimed
    /// for the transaction's caller, and returns their sequence numbers with `body`'s result,
    /// for the caller to wait for. A commit made later — by an `update.perform` continuation,
    /// after the transaction stopped waiting — is not claimed: its failure goes to `onError`
    /// and the next flush, as any other's.
    func claimingSaves<T>(_ body: () -> T) -> (result: T, claimed: [UInt64]) {
        state.withLock { $0.claimed = [] }
        let result = body()
        return (result, state.withLock { state in
            defer { state.claimed = nil }
            return state.claimed ?? []
        })
    }

    deinit {
        // No block or `Update` handle is left, so nothing can run on this context any more:
        // drop its objects (what was not committed is gone) and their strong references.
        core.reset()
    }

    var stack: Stack { starter.stack }

    /// Runs `block` later, on this context. An error it throws rolls back the context's
    /// uncommitted changes and goes to `stack.onError`.
    ///
    /// For example:
    ///
    /// ```swift
    /// let ctx = world.beginUpdateContext()
    /// ctx.perform { update in
    ///     let knight = try update.fetch(Person.self, %"name" == "Knight")
    ///     knight?.age += 1
    ///     try update.commit()
    /// }
    /// ```
    public func perform(_ block: @escaping @Sendable (Update) throws -> Void) {
        let work: @Sendable () -> Void = { [self] in
            queue.async { [self] in
                run { update in
                    do {
                        try block(update)
                    } catch {
                        core.rollback()
                        stack.report(error)
                    }
                }
                finishBlock()
            }
        }
        switch startBlock(whenTurnComes: work) {
        case .now: work()
        case .acquire: starter.turns?.acquire { [self] in grantTurn() }
        case .queued: break
        }
    }

    /// Runs `block` on this context now and waits for it; rethrows what it throws, after
    /// rolling back the context's uncommitted changes.
    public func performAndWait<T>(_ block: (Update) throws -> T) throws -> T {
        precondition(!Execution.isRunning(core), "performAndWait was called from inside a block of the same update context, which would wait for itself forever: run the code directly, or use perform { } to run it after this block.")
        let granted = DispatchSemaphore(value: 0)
        let start = startBlock(whenTurnComes: { granted.signal() })
        if start != .now {
            starter.checkNotInsideOwnSerialUpdate()
            if start == .acquire { starter.turns?.acquire { [self] in grantTurn() } }
            // Blocks queued before this one are on the queue by the time this is signalled.
            granted.wait()
        }
        defer { finishBlock() }
        return try queue.sync {
            try run { update in
                do {
                    return try block(update)
                } catch {
                    core.rollback()
                    throw error
                }
            }
        }
    }

    /// Counts a block in. Under `.serial`, a block of an update without the turn waits for
    /// it: `start` runs when the turn comes, after the blocks that waited before it.
    private func startBlock(whenTurnComes start: @escaping @Sendable () -> Void) -> Start {
        state.withLock { state in
            state.activeBlocks += 1
            guard starter.turns != nil else { return .now }
            switch state.turn {
            case .held:
                return .now
            case .waiting(var pending):
                pending.append(start)
                state.turn = .waiting(pending)
                return .queued
            case .idle:
                state.turn = .waiting([start])
                return .acquire
            }
        }
    }

    /// The turn came: start the blocks that waited for it, in order.
    private func grantTurn() {
        let pending = state.withLock { state -> [@Sendable () -> Void] in
            guard case .waiting(let pending) = state.turn else { return [] }
            state.turn = .held
            return pending
        }
        for start in pending { start() }
    }

    /// Counts a block out; the last one gives the turn back.
    private func finishBlock() {
        let release = state.withLock { state -> Bool in
            state.activeBlocks -= 1
            guard state.activeBlocks == 0, case .held = state.turn else { return false }
            state.turn = .idle
            return true
        }
        if release { starter.turns?.release() }
    }

    /// Runs `body` marked as this context's execution.
    private func run<T>(_ body: (Update) throws -> T) rethrows -> T {
        try Execution.run(as: core) { try body(Update(context: self)) }
    }

    /// Commits pending changes into the target; called by `Update.commit()`.
    func commit() throws {
        core.checkExecution("update.commit()")
        let changes = try core.makeChangeSet()
        if !changes.isEmpty {
            let claims = state.withLock { $0.claimed != nil }
            let sequence = try starter.deliver(changes, waitsForSaves: claims)
            if claims { state.withLock { $0.claimed?.append(sequence) } }
        }
        core.didCommit()
    }
}
