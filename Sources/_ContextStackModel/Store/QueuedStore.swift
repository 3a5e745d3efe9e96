import Dispatch
import _ContextStackCore

/// The part of a store that is the same whatever database sits below it: the queue of commits
/// handed over and not yet written, the overlay that makes them visible at once, group commit,
/// pinned views, `fetchOrCreate` claims, and the waiters of `flush`.
///
/// `SQLiteStore` and `PostgresStore` conform and supply what only they know: how a read
/// fixes its snapshot (`withCommittedView`, `withReadSession`), how a write transaction runs
/// (`writeTransaction`, `execute(_:writer:)`), how one commit or batch operation is written
/// (`writeItem`) and what a database's constraint error means (`saveError`). The rules every
/// store keeps — a commit is seen wholly or not at all, commits are written in the order they
/// became visible, one failing commit of a group fails alone — live here once.
package protocol QueuedStore: ObjectStore {
    /// What the store's writer holds during a write transaction (its connection and caches).
    associatedtype Writer

    /// The queue, the overlay, pins, claims and waiters, under one lock. A store's writer
    /// commits under this lock, and a read fixes its snapshot under it.
    var state: Locked<QueueState> { get }
    /// Whether commits are written by the background writer (a stack with a root) or on the
    /// committing thread (a stack without one).
    var writesInBackground: Bool { get }
    /// Receives errors of background saves (set by the stack to forward to `onError`).
    var reportError: @Sendable (any Error) -> Void { get }
    /// The serial queue the background writer drains on.
    var writeQueue: DispatchQueue { get }
    /// The serial queue that registers async flush waiters while the state lock is taken
    /// (`suspend`): the store's own, so that a long `COMMIT` of another store does not hold
    /// them up.
    var waiterRegistrations: DispatchQueue { get }

    /// Runs `body` under the state lock with a reader that sees exactly what is committed now
    /// (a snapshot fixed under that lock, plus every queued commit: `QueueState.queued`).
    /// Nothing can be written or queued meanwhile, so a commit checked in `body` can be queued
    /// in it too.
    func withCommittedView<T>(_ body: (inout QueueState, inout RowReader) throws -> T) throws -> T

    /// Runs `body` inside one write transaction. `commit` receives the function that commits
    /// it, and runs it under the state lock (so no read sees the database ahead of the
    /// overlay); if anything throws, the transaction is rolled back and the error rethrown.
    func writeTransaction(_ body: (inout Writer) throws -> Void, commit: (() throws -> Void) throws -> Void) throws

    /// Runs a statement without arguments with the writer (`SAVEPOINT`, `RELEASE`, `ROLLBACK TO`).
    func execute(_ sql: String, writer: inout Writer) throws

    /// Which of `ids` have a row in the database, read with the writer inside its transaction
    /// (`storedObjects(_:db:)`).
    func storedObjects(_ ids: [ObjectID], writer: inout Writer) throws -> Set<ObjectID>

    /// Writes one queued commit inside the writer's transaction, or runs one batch operation;
    /// says what it did when that is not simply the commit as queued.
    func writeItem(_ item: QueueItem, writer: inout Writer) throws -> WrittenItem

    /// Records one written commit in the history, inside the writer's transaction (so the
    /// commit and its history are stored together or not at all), and returns its token;
    /// `nil` when the store does not track history. `sequence` is the commit's number in this
    /// process's queue: it grows with the commits of a writer transaction.
    func writeHistory(_ changes: [HistoryChange], info: CommitInfo, sequence: UInt64, writer: inout Writer) throws -> HistoryToken?

    /// The error a failed write becomes for its caller: a database's unique-index violation as
    /// the `SaveError` the store's own check would have thrown, anything else as it is.
    func saveError(_ error: any Error) -> any Error

    /// Takes, before the commits of a transaction are written, the row locks they need — all
    /// at once for a group, in one order that every writer of the database keeps, so that two
    /// processes' groups never wait for each other in a circle. A store whose writer holds the
    /// whole database (SQLite) has nothing to lock.
    func lockRows(of batch: [QueueItem], writer: inout Writer) throws

    /// Whether `error`, thrown while one commit of a group was written, means the database
    /// gave up on the whole transaction (it broke a deadlock with it, say) rather than on the
    /// commit: the group then fails whole, and `writeTransaction` may write it again, instead
    /// of the commit failing alone while the group keeps the locks that caused it.
    func abandonsTransaction(_ error: any Error) -> Bool

    /// Whether a `ROLLBACK TO` of a commit's savepoint that fails means the database ended
    /// the whole transaction for the commit's own error (SQLite does for a full disk, an I/O
    /// error, `RAISE(ROLLBACK)`), which every commit of the group then gets; otherwise (a
    /// PostgreSQL connection that broke) the group gets the rollback's own error.
    var endsTransactionsForStatementErrors: Bool { get }

    /// Whether the write transaction that just failed with `error`, in which the commits of
    /// `sequences` were written, was committed after all: a store whose connection can break
    /// while the server runs `COMMIT` (PostgreSQL) finds out; SQLite's commit is never in
    /// doubt.
    func committedAfterAll(_ sequences: [UInt64], error: any Error) -> Bool
}

// MARK: - Reads whose first statement takes the snapshot

extension QueuedStore {
    /// Runs a read whose first statement takes its snapshot (`attempt(false)`), and again with
    /// the snapshot taken under the state lock (`attempt(true)`) when the first attempt returns
    /// `false` (it does not stand): a commit was written between the lock and that statement
    /// (`snapshotUnchanged`).
    package func readTwice(_ attempt: (_ underLock: Bool) throws -> Bool) throws {
        if try attempt(false) { return }
        guard try attempt(true) else {
            preconditionFailure("a read whose snapshot was taken under the store's lock was abandoned as moved")
        }
    }

    /// A connection's `snapshotCheck` for a read that noted `epoch` under the state lock: true
    /// while no write transaction has ended since, so that a snapshot taken now is the one the
    /// lock would have given.
    package func snapshotUnchanged(since epoch: UInt64) -> () -> Bool {
        let state = self.state
        return { state.withLock { $0.writeEpoch } == epoch }
    }
}

extension QueuedStore {
    package func lockRows(of batch: [QueueItem], writer: inout Writer) throws {}
    package func abandonsTransaction(_ error: any Error) -> Bool { false }
    package var endsTransactionsForStatementErrors: Bool { false }
}

/// The state every `QueuedStore` keeps under its lock.
package struct QueueState: Sendable {
    /// The commits handed to the store and not yet written that reads merge in: those visible
    /// at their targets. A commit that waits to be written (`QueueItem.afterWrite`) is not
    /// here: reads see it once it is in the database, in the same hold of this lock as its
    /// receivers hear of it — so a read never shows a commit that then fails, and a main
    /// context's read never shows one the context was not handed. (A pinned view's reads
    /// merge in `queued` instead, as its before-images are captured from it.)
    package var overlay = Overlay()
    /// `overlay` with the waiting commits too, while some are queued (`nil` when it would be
    /// `overlay` itself, so that commits visible when queued are applied once).
    var withWaiting: Overlay?
    /// The sequence number of the last waiting commit queued.
    var lastWaiting: UInt64 = 0
    /// Views pinned by main contexts that do not merge, with their before-images.
    package var pins: [UInt64: PinnedImages] = [:]
    var nextPin: UInt64 = 1
    /// Commits waiting for the writer; `claimed` ones have a caller waiting for their outcome.
    var queue: [QueueItem] = []
    package var lastSequence: UInt64 = 0
    package var writtenSequence: UInt64 = 0
    /// The sequence of the last batch update queued on each root entity, and of the last batch
    /// delete (whose rules can reach any entity): a batch becomes visible only once written,
    /// so a commit's uniqueness check waits for it (`submit`).
    var lastBatchUpdate: [ObjectIdentifier: UInt64] = [:]
    var lastBatchDelete: UInt64 = 0
    /// The sequence of the last batch operation queued: unwritten while it is above
    /// `writtenSequence`.
    var lastBatchSequence: UInt64 { max(lastBatchDelete, lastBatchUpdate.values.max() ?? 0) }
    var isDraining = false
    var errors: [any Error] = []
    /// Why a commit failed, by sequence number, for `waitUntilWritten`.
    var failures: [UInt64: any Error] = [:]
    /// The objects failed commits inserted, never stored: a commit that changes one, or
    /// relates an object to one, fails too (`QueuedStore.write`).
    var failedInserts = FailedInserts()
    /// The objects `fetchOrCreate` made whose inserts were merged into rows saved meanwhile,
    /// with those rows: a later commit that names one names the row (`QueuedStore.redirect`).
    var mergedObjects = MergedObjects()
    var waiters: [(sequence: UInt64, waiter: FlushWaiter)] = []
    /// How many write transactions the writer has committed (group commit makes it fewer
    /// than the commits it wrote).
    package var transactionCount = 0
    /// Moves on whenever the writer ends a transaction, in the same hold of this lock as its
    /// `COMMIT`. A read that took what it keeps in step with its snapshot (the overlay, the
    /// commits handed to its context) under this lock, and its snapshot only later, outside
    /// it, finds this unchanged when nothing was written in between: its snapshot is then
    /// the one it would have taken under the lock (`SQLiteStore.withReadSession`).
    package var writeEpoch: UInt64 = 0
    /// Unique values claimed by `fetchOrCreate`, with the ID of the object made for them.
    var claims: [UniqueClaim: ObjectID] = [:]
    var claimOrder: [UniqueClaim] = []
    /// What batch operations did, by sequence number, until their caller takes it.
    var batchResults: [UInt64: BatchResult] = [:]

    package init() {}
}

extension QueueState {
    /// Every commit handed to the store and not yet written, waiting ones included: what a
    /// new commit is checked against (`withCommittedView`), as the writer writes it after them.
    package var queued: Overlay { withWaiting ?? overlay }
    /// Whether no commit is queued for the writer or being written.
    package var nothingToWrite: Bool { queue.isEmpty && !isDraining && overlay.isEmpty }

    /// What a read merges in: `overlay`, or `queued` for a pinned view's read — a pinned view
    /// sees commits that wait to be written from when they are queued, as its before-images
    /// do (`QueuedStore.capture` reads what is queued).
    package func overlay(forPin pin: UInt64?) -> Overlay { pin == nil ? overlay : queued }

    /// Adds a queued commit to the overlays: to reads' only when it is visible at once.
    mutating func queue(_ changes: ChangeSet, sequence: UInt64, visible: Bool) {
        if visible {
            overlay.apply(changes, sequence: sequence)
            withWaiting?.apply(changes, sequence: sequence)
        } else {
            if withWaiting == nil { withWaiting = overlay }
            withWaiting!.apply(changes, sequence: sequence)
            lastWaiting = sequence
        }
    }

    /// Drops the commits up to `last`, written or failed, from the overlays.
    mutating func removeWritten(upTo last: UInt64) {
        overlay.removeWritten(upTo: last)
        if last >= lastWaiting {
            withWaiting = nil
        } else {
            withWaiting?.removeWritten(upTo: last)
        }
    }
}

/// What the writer did with one queued item.
package enum WrittenItem: Sendable {
    /// The commit, as it was queued.
    case asQueued
    /// A batch operation, and what it amounted to.
    case batch(BatchResult)
    /// The commit, changed by what the writer found stored: `saved` is what was written, and
    /// `correction` what brings receivers that were told the queued commit to it (a
    /// `fetchOrCreate` whose values another process saved first: its object is replaced by
    /// the saved one). `merged` names those objects, each with the saved row it became.
    case rewritten(saved: ChangeSet, correction: ChangeSet, merged: [ObjectID: ObjectID] = [:])
}

/// A commit waiting for the writer.
package struct QueueItem: Sendable {
    package var changes: ChangeSet
    /// The merge policy it was resolved under; a store whose rows other processes change
    /// between the check and the write resolves it again under the same policy.
    package var policy: MergePolicy = .objectTrump
    /// A caller waits for the outcome; a failure goes to it alone.
    let claimed: Bool
    /// Runs under the lock once the commit is written (for commits visible only then).
    let afterWrite: (@Sendable (ChangeSet) -> Void)?
    /// For a commit announced before it was written: told what brings the receivers back to
    /// what is stored when that differs from what they were told — what undoes the commit if
    /// writing it fails, or a `WrittenItem.rewritten` correction.
    var correct: (@Sendable (ChangeSet) -> Void)? = nil
    /// A batch operation, which learns its changes only when the writer runs it.
    package var batch: BatchOperation? = nil
    package var sequence: UInt64 = 0
}

// MARK: - Pins, claims, flushing

extension QueuedStore {
    /// Pins a view of the store as it is now: reads with the returned ID see every row as it
    /// was at this moment, whatever is committed later, until `unpin`. The view shows the
    /// commits queued by now; should one fail to be saved, or be saved otherwise, `correct`
    /// hears what undoes or corrects it (`undoAnnounced`, `announceWritten`).
    package func pin(correct: (@Sendable (ChangeSet) -> Void)?) -> UInt64 {
        state.withLock { state in
            let id = state.nextPin
            state.nextPin += 1
            state.pins[id] = PinnedImages(seenUpTo: state.lastSequence, correct: correct)
            return id
        }
    }

    package func unpin(_ id: UInt64) {
        _ = state.withLock { $0.pins.removeValue(forKey: id) }
    }

    /// Whether a batch operation is queued and not written yet (for tests).
    package var hasUnwrittenBatch: Bool { state.withLock { $0.lastBatchSequence > $0.writtenSequence } }

    /// How many write transactions the writer has run so far.
    package var transactionCount: Int { state.withLock { $0.transactionCount } }

    /// Waits until every commit handed over before the call is written, then throws the
    /// first error of a failed background save since the last flush, if any.
    package func flush() async throws {
        try await suspend(until: FlushWaiter(), upTo: nil)
    }

    /// Blocks until every commit handed over before the call is written (or failed), without
    /// taking background errors from `flush()`.
    package var submittedCount: UInt64 { state.withLock { $0.lastSequence } }

    package func waitUntilQueuedWritten() {
        waitUntilWritten(upTo: state.withLock { $0.lastSequence })
    }

    package func awaitQueuedWritten() async {
        try? await suspend(until: FlushWaiter(reporting: .nothing), upTo: nil)
    }

    /// Blocks until the commits up to `sequence` are written (or failed), reporting nothing.
    func waitUntilWritten(upTo sequence: UInt64) {
        let waiter = FlushWaiter(reporting: .nothing)
        register(waiter, upTo: sequence)
        try? waiter.wait()
    }

    /// Blocks until every commit handed over before the call is written; see `flush()`.
    package func flushAndWait() throws {
        let waiter = FlushWaiter()
        register(waiter, upTo: nil)
        try waiter.wait()
    }

    /// Waits until the commit with `sequence` is written; throws if saving it failed.
    package func waitUntilWritten(_ sequence: UInt64) async throws {
        try await suspend(until: FlushWaiter(sequence: sequence), upTo: sequence)
    }

    /// Suspends until `waiter` is resumed by the writer, once the commits up to `sequence`
    /// (all those handed over, for `nil`) are written; throws what the waiter reports.
    private func suspend(until waiter: FlushWaiter, upTo sequence: UInt64?) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            waiter.setContinuation(continuation)
            // The caller runs on Swift's cooperative pool, which must not block. The writer
            // holds the state lock across a `COMMIT`, which for a large transaction (or on a
            // server that stopped answering) takes long: when the lock is taken, the waiter is
            // registered from a queue of the store's instead, and the task stays suspended.
            // One serial queue per store, so that waiters that come while the lock is held
            // take one thread between them, and wait for this store's lock alone. (Registered
            // a moment later, a `flush()` may wait for commits handed over just after it was
            // called too.)
            guard !register(waiter, upTo: sequence, ifLockIsFree: true) else { return }
            waiterRegistrations.async { [self] in register(waiter, upTo: sequence) }
        }
    }

    /// Registers `waiter` to be resumed once the commits up to `sequence` are written (at once
    /// if they are). With `ifLockIsFree`, does nothing when another thread holds the state
    /// lock; returns whether it registered.
    @discardableResult
    func register(_ waiter: FlushWaiter, upTo sequence: UInt64?, ifLockIsFree: Bool = false) -> Bool {
        // What the waiter reports when the commits are written already: taken in the same
        // hold of the lock, which a caller on the cooperative pool must not wait for again.
        func add(_ state: inout QueueState) -> (ready: Bool, error: (any Error)?) {
            let target = sequence ?? state.lastSequence
            if state.writtenSequence >= target { return (true, waiter.outcome(in: &state)) }
            state.waiters.append((target, waiter))
            return (false, nil)
        }
        let added: (ready: Bool, error: (any Error)?)
        if ifLockIsFree {
            guard let free = state.withLockIfAvailable(add) else { return false }
            added = free
        } else {
            added = state.withLock(add)
        }
        if added.ready { waiter.resume(reporting: added.error) }
        return true
    }
}

/// A waiter for `flush`, resumed by the writer once its sequence is written.
final class FlushWaiter: Sendable {
    /// An async caller's continuation, and what the waiter reports once resumed: under one
    /// lock (one each was two `NSLock`s made and freed for every commit a caller waits for).
    private let waiting = Locked<(continuation: CheckedContinuation<Void, any Error>?, outcome: (any Error)?)>((nil, nil))
    private let semaphore = DispatchSemaphore(value: 0)
    /// What the waiter throws once resumed.
    enum Reporting: Sendable {
        /// The first background error since the last flush (`flush()`).
        case backgroundErrors
        /// The failure of this commit, if it failed (a caller waiting for its own commit).
        case failure(of: UInt64)
        /// Nothing: the caller only waits.
        case nothing
    }

    private let reporting: Reporting

    /// Whether the caller only waits for commits to be written (`waitUntilWritten(upTo:)`).
    var onlyWaits: Bool {
        if case .nothing = reporting { return true }
        return false
    }

    init(sequence: UInt64) { self.reporting = .failure(of: sequence) }
    init(reporting: Reporting = .backgroundErrors) { self.reporting = reporting }

    func setContinuation(_ continuation: CheckedContinuation<Void, any Error>) {
        waiting.withLock { $0.continuation = continuation }
    }

    /// Takes what the waiter reports from the store's state, under its lock, once the
    /// commits it waits for are written.
    func outcome(in state: inout QueueState) -> (any Error)? {
        switch reporting {
        case .failure(let sequence):
            return state.failures.removeValue(forKey: sequence)
        case .backgroundErrors:
            defer { state.errors.removeAll() }
            return state.errors.first
        case .nothing:
            return nil
        }
    }

    /// Wakes the waiter's caller with what it reports (`outcome(in:)`), outside the state lock.
    func resume(reporting error: (any Error)?) {
        let continuation = waiting.withLock { waiting in
            waiting.outcome = error
            return waiting.continuation.take()
        }
        if let continuation {
            if let error { continuation.resume(throwing: error) } else { continuation.resume() }
        }
        semaphore.signal()
    }

    func wait() throws {
        precondition(!Execution.isReportingWriteFailure, "A write was waited for (flushAndWait, a commit to .persistentStore, a commit on a stack without a root, a batch update or delete, an aggregate query that waits for queued commits) inside stack.onError, which the writer calls in the middle of writing: it would wait for itself forever. Do it after onError returns: Task { try await stack.flush() }, or DispatchQueue.global().async { … }.")
        semaphore.wait()
        if let error = waiting.withLock({ $0.outcome }) { throw error }
    }
}

/// The objects that failed commits inserted and that no commit stored since, newest failures
/// kept first: up to `limit` objects, and always all of the newest failed commit's.
struct FailedInserts: Sendable {
    static let limit = 100_000
    /// Every object kept; handed to the writer as a copy, which costs nothing until one side
    /// changes.
    private(set) var objects: Set<ObjectID> = []
    /// Each failed commit's objects still kept, oldest first, so that the oldest go first.
    private var commits: [[ObjectID]] = []

    /// Keeps the objects one failed commit inserted, forgetting the oldest commits' beyond
    /// `limit`.
    mutating func add(_ ids: [ObjectID]) {
        let added = ids.filter { objects.insert($0).inserted }
        guard !added.isEmpty else { return }
        commits.append(added)
        while objects.count > Self.limit && commits.count > 1 {
            for id in commits.removeFirst() { objects.remove(id) }
        }
    }

    /// Forgets objects a commit stored after all.
    mutating func remove(_ stored: Set<ObjectID>) {
        guard !stored.isEmpty else { return }
        objects.subtract(stored)
        commits = commits.map { $0.filter { !stored.contains($0) } }.filter { !$0.isEmpty }
    }
}

/// The objects a `fetchOrCreate` made whose inserts were merged into a row another process (or
/// stack) had saved with the same unique values (`QueuedStore.adoptSavedRows`), each with that
/// row, newest kept: up to `limit`, and always all of the newest commit's. A context holds such
/// an object until the correction that replaces it reaches it, and a commit it makes meanwhile
/// names it.
struct MergedObjects: Sendable {
    static let limit = 100_000
    /// Handed to the writer as a copy, which costs nothing until one side changes.
    private(set) var rows: [ObjectID: ObjectID] = [:]
    /// Each commit's merged objects still kept, oldest first.
    private var commits: [[ObjectID]] = []

    /// Keeps one commit's merged objects, forgetting the oldest commits' beyond `limit`.
    mutating func add(_ merged: [ObjectID: ObjectID]) {
        guard !merged.isEmpty else { return }
        var added: [ObjectID] = []
        for (object, row) in merged where rows.updateValue(row, forKey: object) == nil { added.append(object) }
        if !added.isEmpty { commits.append(added) }
        while rows.count > Self.limit && commits.count > 1 {
            for id in commits.removeFirst() { rows[id] = nil }
        }
    }
}
