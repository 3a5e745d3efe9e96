import _ContextStackCore

/// The store seam: everything the contexts and the stack ask of a store, and nothing else.
///
/// Contexts reserve primary keys for new objects, read rows inside a read session (through
/// the session's `QueryConnection`, overlaid with commits not yet written), pin views, submit
/// change sets under a merge policy, run batch operations, claim unique values for
/// `fetchOrCreate`, and wait for what they committed to be written. `SQLiteStore` is the first
/// implementation; a second store (PostgreSQL) implements the same protocol, and every context,
/// topology, predicate and live result works on it unchanged.
///
/// Every method may be called from any thread; a store protects its own state.
package protocol ObjectStore: AnyObject, Sendable {
    /// The resolved model the store holds.
    var graph: ModelGraph { get }
    /// How the store's database spells what differs between databases in a query.
    var dialect: any SQLDialect { get }

    /// A new primary key for an object of the family rooted at `root`, without a round trip
    /// per object (stores hand them out from reserved blocks).
    func reserveKey(for root: EntityDescription) throws -> Int64

    /// Runs `body` with a read session whose connection and overlay together show every
    /// commit wholly or not at all. With `pin`, the session also carries that pinned view's
    /// before-images. `whileLocked` runs where the session's snapshot is fixed; without it, a
    /// store may fix the snapshot later, at the session's first statement, when nothing it
    /// holds must match the snapshot exactly (PostgreSQL, with nothing pending or pinned).
    /// `shape` says how much `body` runs (`ReadShape`), which a store may use to run it
    /// outside any transaction, or on a connection it has idle. `body` may run twice: an
    /// attempt whose snapshot turned out not to be the one it needed is run again.
    ///
    /// Not generic: stores are called through `any ObjectStore`, where a generic result's
    /// `Optional` was looked up in the runtime's metadata cache at every read, twice (1.3 k
    /// instructions, 3 % of a small query). `read(pin:whileLocked:shape:_:)` returns a value.
    func withReadSession(pin: UInt64?, whileLocked: (() -> Void)?, shape: ReadShape, _ body: (ReadSession) throws -> Void) throws

    /// Pins a view of the store as it is now; reads with the ID see it until `unpin`.
    /// `correct` receives what undoes a commit the view shows that then fails to be saved,
    /// and what the writer saved otherwise than the view shows (`PinnedImages.correct`).
    func pin(correct: (@Sendable (ChangeSet) -> Void)?) -> UInt64
    func unpin(_ id: UInt64)

    /// Hands a commit to the store: visible to every read at once, written in the store's
    /// order. `onVisible` runs once the commit is visible at its target (see `SQLiteStore.submit`).
    /// - Throws: `MergeConflictError` under `.error`; with `wait`, the save's error.
    func submit(_ changes: ChangeSet, policy: MergePolicy, claimed: Bool, wait: Bool,
                onVisible: @escaping @Sendable (ChangeSet) -> Void) throws -> Submission

    /// Runs a batch operation in the writer's order and waits until it is written; `info`
    /// says who made it, for the history.
    func runBatch(_ operation: BatchOperation, info: CommitInfo, onVisible: @escaping @Sendable (ChangeSet) -> Void) throws -> BatchResult

    /// The ID concurrent `fetchOrCreate`s that found nothing agree on for `claims`.
    func claim(_ claims: [UniqueClaim], proposed: ObjectID) -> ObjectID

    /// How many commits were handed over so far: a number that only grows.
    var submittedCount: UInt64 { get }

    /// Waits until every commit handed over before the call is written; throws the first
    /// error of a failed background save since the last flush.
    func flush() async throws
    /// Blocks until every commit handed over before the call is written; see `flush()`.
    func flushAndWait() throws
    /// Waits until the commit with `sequence` is written; throws if saving it failed.
    func waitUntilWritten(_ sequence: UInt64) async throws
    /// Blocks until every commit handed over before the call is written (or failed), without
    /// taking background errors from `flush()`.
    func waitUntilQueuedWritten()
    /// Suspends until every commit handed over before the call is written (or failed), without
    /// taking background errors from `flush()`: `waitUntilQueuedWritten` for async callers.
    func awaitQueuedWritten() async

    // MARK: History (Docs/History.md)

    /// Whether every save writes history, in its own transaction.
    var tracksHistory: Bool { get }
    /// The transactions after `token` (from the first when `nil`), oldest first.
    /// - Throws: `HistoryError` `.expired` when some were deleted, `.notTracked`.
    func history(after token: HistoryToken?) throws -> [HistoryTransaction]
    /// Deletes the transactions before `token`.
    func deleteHistory(before token: HistoryToken) throws
    /// The token of the newest transaction, or `nil` when there is none.
    func lastHistoryToken() throws -> HistoryToken?
    /// Starts following the transactions other stacks (processes, machines) write: `deliver`
    /// receives them in history order, from a queue of the store's, from the newest
    /// transaction at the time of the call on. Own commits are never delivered.
    ///
    /// The follower opens its own connection where it runs, not on the caller's thread, and
    /// opens it again, and reads what it missed, whenever it cannot read: once following
    /// started, a failure delays remote commits and never loses them.
    /// - Throws: when the newest transaction, where following starts, cannot be read; nothing
    ///   was started then.
    func followHistory(_ deliver: @escaping @Sendable ([RemoteTransaction]) -> Void) throws
}

extension ObjectStore {
    /// `withReadSession`, returning what `body` returned in the attempt that stood. For tests
    /// and cold paths: called on `any ObjectStore` it runs unspecialized, its `Optional<T>`
    /// looked up in the runtime at every call, which is why a context's reads
    /// (`ContextCore.read`) call `withReadSession` themselves.
    package func read<T>(pin: UInt64? = nil, whileLocked: (() -> Void)? = nil, shape: ReadShape = .statements,
                         _ body: (ReadSession) throws -> T) throws -> T {
        var result: T?
        try withReadSession(pin: pin, whileLocked: whileLocked, shape: shape) { result = try body($0) }
        return readResult(result, of: self)
    }
}

/// What a read's body returned, given to the caller of `withReadSession`, which returned
/// without throwing: a store that did so without running the body to its end is wrong.
@inline(__always)
func readResult<T>(_ result: T?, of store: any ObjectStore) -> T {
    guard let result else {
        preconditionFailure("\(type(of: store)).withReadSession returned without running its body to the end: a store must run it, or throw.")
    }
    return result
}

/// How much a read runs, as far as its store cares.
package enum ReadShape: Sendable {
    /// Any number of statements.
    case statements
    /// At most one statement when the session's overlay is empty and nothing is pinned, whose
    /// own snapshot is then all the session needs: a store may run it outside any transaction.
    case oneStatement
    /// `oneStatement`, and that statement reads a few rows by their primary keys (at most
    /// `mostKeys`, an index probe each): short enough that a store may run it on its
    /// writer's connection while no write needs it (PostgreSQL: one server process woken
    /// instead of two for a read-modify-write), holding up a commit that comes meanwhile by
    /// no more than that.
    case byKeys

    /// The most rows a `byKeys` read reads.
    package static let mostKeys = 8

    /// Whether the read runs at most one statement (`oneStatement` or `byKeys`).
    package var isOneStatement: Bool { self != .statements }
}

/// What a submitted commit became: its sequence number in the store's order, and the change
/// set as saved once the merge policy resolved conflicts.
package struct Submission: Sendable {
    package let sequence: UInt64
    let changes: ChangeSet

    package init(sequence: UInt64, changes: ChangeSet) {
        self.sequence = sequence
        self.changes = changes
    }
}

/// The values of one uniqueness constraint that a `fetchOrCreate` looked for and did not
/// find, and the entity it creates: the key under which concurrent `fetchOrCreate`s agree on
/// one object ID.
package struct UniqueClaim: Hashable, Sendable {
    let index: String
    let entity: String
    let values: [Value]
    /// The hash of the index and the values, computed once: the entity, compared by `==`,
    /// differs only between entities that share a parent's constraint, and hashing its name
    /// as well cost every claim. A table of claims compares the keys along a probe and
    /// rehashes every key as it grows: with the hash at hand, neither reads the values' text,
    /// which lies elsewhere in memory (with 50,000 claims, a cache miss a key).
    private let digest: Int

    package init(index: String, entity: String, values: [Value]) {
        self.index = index
        self.entity = entity
        self.values = values
        var hasher = Hasher()
        hasher.combine(index)
        hasher.combine(values)
        digest = hasher.finalize()
    }

    package static func == (lhs: UniqueClaim, rhs: UniqueClaim) -> Bool {
        lhs.digest == rhs.digest && lhs.index == rhs.index && lhs.entity == rhs.entity && lhs.values == rhs.values
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(digest)
    }
}

/// One read of a store: what its SQL runs on, and what that SQL cannot see yet.
package struct ReadSession {
    let graph: ModelGraph
    /// What the session's SQL runs on: the seam between the readers and the store's client.
    package let connection: any QueryConnection
    /// Commits handed to the store and not yet written.
    package let overlay: Overlay
    /// The before-images of a pinned view, for reads that must not see later commits.
    var pinned: PinnedImages?

    package init(graph: ModelGraph, connection: any QueryConnection, overlay: Overlay, pinned: PinnedImages? = nil) {
        self.graph = graph
        self.connection = connection
        self.overlay = overlay
        self.pinned = pinned
    }
}

/// A batch update or delete: run by the store's writer in its turn among the commits, as one
/// statement against the stored rows (no objects are loaded), so it acts on every commit
/// handed over before it.
package enum BatchOperation: Sendable {
    /// Sets the same values on every row of `entity` matching `condition`.
    case update(ResolvedEntity, Condition?, [(slot: Int, value: Value)])
    /// Deletes every row of `entity` matching `condition`, applying delete rules.
    case delete(ResolvedEntity, Condition?)
}

/// What a batch operation did: the commit it amounts to, and how many rows it matched.
package struct BatchResult: Sendable {
    package var changes = ChangeSet()
    package var matched = 0

    package init(changes: ChangeSet = ChangeSet(), matched: Int = 0) {
        self.changes = changes
        self.matched = matched
    }
}
