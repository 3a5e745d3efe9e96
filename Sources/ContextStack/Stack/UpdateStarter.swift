import Foundation

/// What `MainContext` and `Context` share: starting updates in their topology and order,
/// routing commits to their target, and telling observers.
final class UpdateStarter: Sendable {
    let stack: Stack
    let target: UpdateTarget
    let order: UpdateOrder
    let policy: MergePolicy
    let id: ContextID
    /// The main context updates commit into (`.mainContext` target).
    let main: ObjectContext?
    /// The turn `.serial` updates take; `nil` for `.default`.
    let turns: SerialTurns?

    init(stack: Stack, target: UpdateTarget, order: UpdateOrder, policy: MergePolicy, main: ObjectContext?) {
        self.stack = stack
        self.target = target
        self.order = order
        self.policy = policy
        self.main = main
        self.id = stack.makeContextID()
        self.turns = order == .serial ? SerialTurns() : nil
    }

    func makeUpdateContext(waitsForSaves: Bool = false) -> UpdateContext {
        UpdateContext(starter: self, waitsForSaves: waitsForSaves)
    }

    /// Saves a commit into the target and tells observers; returns the store's sequence number.
    func deliver(_ changes: ChangeSet, waitsForSaves: Bool) throws -> UInt64 {
        let store = stack.store
        let submission: Store.Submission
        switch target {
        case .mainContext:
            let main = self.main
            submission = try store.submit(changes, policy: policy, claimed: waitsForSaves) { resolved in
                main?.handOver(resolved)
                stack.handOverToAutoMergers(resolved, except: main)
            }
        case .rootContext:
            submission = try store.submit(changes, policy: policy, claimed: waitsForSaves) { resolved in
                stack.handOverToAutoMergers(resolved, except: nil)
            }
        case .persistentStore:
            submission = try store.submit(changes, policy: policy, claimed: true, wait: true)
        }
        if !submission.changes.isEmpty {
            stack.commits.publish(Commit(submission.changes, origin: id, target: target))
        }
        return submission.sequence
    }

    /// Traps when the caller runs inside an update of this starter that holds the serial turn:
    /// waiting for the turn there would wait forever.
    func checkNotInsideOwnSerialUpdate() {
        guard turns != nil, let running = Execution.current(), running.starter == ObjectIdentifier(self) else { return }
        preconditionFailure("beginUpdateAndWait was called from inside one of this context's own updates, and updateOrder is .serial: it would wait for its own turn forever. Do the work in the current update, or use beginUpdate { } to run it after.")
    }

    // MARK: - The forms shared by MainContext and Context

    func beginUpdate(_ block: @escaping @Sendable (Update) throws -> Void) {
        makeUpdateContext().perform(block)
    }

    func beginUpdateAndWait<T>(_ block: (Update) throws -> T) throws -> T {
        if turns != nil { checkNotInsideOwnSerialUpdate() }
        defer {
            // Back on the main actor after our own commit: its objects show it now.
            if let main, Thread.isMainThread || Execution.isOnMainQueue { main.applyInbox() }
        }
        return try makeUpdateContext().performAndWait(block)
    }

    func transaction<T: Sendable>(_ body: @escaping @Sendable (Update) throws -> T) async throws -> T {
        let context = makeUpdateContext(waitsForSaves: true)
        let result: T = try await withCheckedThrowingContinuation { continuation in
            context.perform { update in
                do {
                    let value = try body(update)
                    try update.commit()
                    continuation.resume(returning: value)
                } catch {
                    update.rollback()
                    continuation.resume(throwing: error)
                }
            }
        }
        if let sequence = context.lastSequence {
            try await stack.store.waitUntilWritten(sequence)
        }
        return result
    }
}
