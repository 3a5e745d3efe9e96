import Dispatch

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
    let core: ObjectContext
    let starter: UpdateStarter
    private let queue = DispatchQueue(label: "ContextStack.UpdateContext")
    /// Set for `transaction`: the caller waits for durability and receives save errors.
    let waitsForSaves: Bool
    private let state = Locked(State())

    private struct State {
        var lastSequence: UInt64?
        /// Blocks queued or running; under `.serial` the update holds its turn while this is > 0.
        var activeBlocks = 0
    }

    init(starter: UpdateStarter, waitsForSaves: Bool = false) {
        self.core = ObjectContext(kind: .update, stack: starter.stack)
        self.core.starter = ObjectIdentifier(starter)
        self.starter = starter
        self.waitsForSaves = waitsForSaves
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
        let schedule: @Sendable () -> Void = { [self] in
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
        if startBlock(), let turns = starter.turns {
            turns.acquire(schedule)
        } else {
            schedule()
        }
    }

    /// Runs `block` on this context now and waits for it; rethrows what it throws, after
    /// rolling back the context's uncommitted changes.
    public func performAndWait<T>(_ block: (Update) throws -> T) throws -> T {
        precondition(!Execution.isRunning(core), "performAndWait was called from inside a block of the same update context, which would wait for itself forever: run the code directly, or use perform { } to run it after this block.")
        if startBlock(), let turns = starter.turns {
            starter.checkNotInsideOwnSerialUpdate()
            turns.acquireAndWait()
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

    /// Counts a block in; true when the update was idle (under `.serial`, it needs the turn).
    private func startBlock() -> Bool {
        state.withLock { state in
            state.activeBlocks += 1
            return state.activeBlocks == 1
        }
    }

    /// Counts a block out; the last one gives the turn back.
    private func finishBlock() {
        let idle = state.withLock { state in
            state.activeBlocks -= 1
            return state.activeBlocks == 0
        }
        if idle { starter.turns?.release() }
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
            let sequence = try starter.deliver(changes, waitsForSaves: waitsForSaves)
            state.withLock { $0.lastSequence = sequence }
        }
        core.didCommit()
    }

    /// The root sequence number of the last commit, for durability waits.
    var lastSequence: UInt64? { state.withLock { $0.lastSequence } }
}
