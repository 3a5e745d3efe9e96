import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// What `MainContext` and `Context` share: starting updates in their topology and order,
/// routing commits to their target, and telling observers.
final class UpdateStarter: Sendable {
    let stack: Stack
    let target: UpdateTarget
    let order: UpdateOrder
    let policy: MergePolicy
    let id: ContextID
    /// Recorded in the history with each commit (`author:`).
    let author: String?
    /// The main context updates commit into (`.mainContext` target).
    let main: ContextCore?
    /// The turn `.serial` updates take; `nil` for `.default`.
    let turns: SerialGate?

    init(stack: Stack, target: UpdateTarget, order: UpdateOrder, policy: MergePolicy, main: ContextCore?, author: String?) {
        self.stack = stack
        self.target = target
        self.order = order
        self.policy = policy
        self.author = author
        self.main = main
        self.id = stack.makeContextID()
        self.turns = order == .serial ? SerialGate() : nil
    }

    func makeUpdateContext() -> UpdateContext {
        UpdateContext(starter: self)
    }

    /// Saves a commit into the target and tells observers; returns the store's sequence number.
    ///
    /// Main contexts receive the commit, and observers are told of it, under the store's lock
    /// at the moment it becomes visible at the target — queued for the root, or written for a
    /// commit that must be in SQLite first — so both see commits in that order.
    func deliver(_ changes: ChangeSet, waitsForSaves: Bool) throws -> UInt64 {
        var changes = changes
        changes.info = info
        switch target {
        case .mainContext, .rootContext:
            return try stack.store.submit(changes, policy: policy, claimed: waitsForSaves, wait: false, onVisible: receivers).sequence
        case .persistentStore:
            return try stack.store.submit(changes, policy: policy, claimed: true, wait: true, onVisible: receivers).sequence
        }
    }

    /// Who makes this starter's commits, for the history.
    var info: CommitInfo { CommitInfo(author: author, origin: id.rawValue) }

    /// Hands a commit, once visible at this starter's target, to the main contexts that merge
    /// it and to commit observers.
    var receivers: @Sendable (ChangeSet) -> Void {
        let stack = self.stack
        let origin = id
        let target = self.target
        let main = target == .mainContext ? self.main : nil
        return { changes in
            if let main { main.handOver(changes) }
            if target != .persistentStore { stack.handOverToAutoMergers(changes, except: main) }
            if !changes.isEmpty { stack.commits.publish(Commit(changes, origin: origin, target: target)) }
        }
    }

    /// Traps when the caller runs inside an update of this starter that holds the serial turn:
    /// waiting for the turn there would wait forever.
    func checkNotInsideOwnSerialUpdate() {
        guard turns != nil, let running = Execution.current(), running.starter == ObjectIdentifier(self) else { return }
        preconditionFailure("An update was waited for (beginUpdateAndWait or performAndWait) from inside one of this context's own updates, and updateOrder is .serial: it would wait for its own turn forever. Do the work in the current update, or use beginUpdate { } to run it after.")
    }

    // MARK: - The forms shared by MainContext and Context

    func beginUpdate(_ block: @escaping @Sendable (Update) throws -> Void) {
        makeUpdateContext().perform(block)
    }

    func beginUpdateAndWait<T>(_ block: (Update) throws -> T) throws -> T {
        if turns != nil { checkNotInsideOwnSerialUpdate() }
        defer {
            // Back on the main actor after our own commit: its objects show it now.
            if let main, Execution.isMainThread || Execution.isOnMainQueue { main.applyInbox() }
        }
        return try makeUpdateContext().performAndWait(block)
    }

    /// Runs `body` in a fresh update, commits, and returns once every commit it made is
    /// written.
    ///
    /// Each of those commits is claimed for this caller (`claimingSaves`): a failure to save
    /// one goes nowhere but here. So every one is waited for, also when `body` threw after
    /// committing, and none is lost: the caller gets `body`'s error, or else the first save
    /// failure; any other save failure, which it cannot also receive, goes to `onError`.
    func transaction<T: Sendable>(_ body: @escaping @Sendable (Update) throws -> T) async throws -> T {
        let context = makeUpdateContext()
        let (outcome, claimed) = await withCheckedContinuation { (continuation: CheckedContinuation<(Result<T, any Error>, [UInt64]), Never>) in
            context.perform { update in
                continuation.resume(returning: context.claimingSaves {
                    Result { () throws -> T in
                        do {
                            let value = try body(update)
                            try update.commit()
                            return value
                        } catch {
                            update.rollback()
                            throw error
                        }
                    }
                })
            }
        }
        var thrown: (any Error)?
        if case .failure(let error) = outcome { thrown = error }
        for sequence in claimed {
            do {
                try await stack.store.waitUntilWritten(sequence)
            } catch {
                if thrown == nil { thrown = error } else { stack.report(error) }
            }
        }
        if let thrown { throw thrown }
        return try outcome.get()
    }
}
