import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLiteStore
import _ContextStackSQLite

/// The top of ContextStack: a model, the stores that hold it, and the root writer.
///
/// For example:
///
/// ```swift
/// let stack = try Stack(model: Model(Person.self, Pet.self))
/// try stack.addDatabaseStore(at: url)
/// let world = try MainContext(stack: stack)
/// ```
///
/// With `rootContext: .shared` (the default) commits reach SQLite through a root writer on a
/// background queue: `commit()` returns after the first hop, and `flush()` waits until
/// everything committed before it is in SQLite. With `.none` there is no root: whatever saves
/// into the store writes SQLite before `commit()` returns.
public final class Stack: Sendable {
    /// Whether the stack has a root writer between contexts and the store.
    public enum RootContext: Sendable, Hashable {
        /// A root writer on a background queue, with group commit (the default).
        case shared
        /// No root: saving into the store writes SQLite on the committing thread.
        case none
    }

    package let graph: ModelGraph
    /// The stack's root: `.shared` or `.none`.
    public let rootContext: RootContext
    private let state = Locked(State())
    /// Delivers commits to observers on the main actor.
    let commits = CommitHub()
    /// Shared by the stack's stores: `trace(_:)` sets what it calls.
    package let tracer = StatementTracer()

    /// Hands the SQL of every statement the stack's stores run to `body`, on the thread that
    /// runs it; `nil` stops tracing. Bound values appear as `?` and never reach the trace.
    ///
    /// For example: `stack.trace { sql in print(sql) }` — to see what a fetch with `.prefetch`
    /// or `.batch` costs, or to count statements in a test.
    public func trace(_ body: (@Sendable (String) -> Void)?) {
        tracer.set(body)
    }

    private struct State: Sendable {
        var store: (any ObjectStore)?
        /// The settings of every store added, first added first.
        var storeSettings: [StoreSettings] = []
        var onError: (@Sendable (any Error) -> Void)?
        var nextContextID: UInt64 = 1
        /// Main contexts with `.rootContext(autoMerge: true)`: they merge every save of the root.
        var autoMergers: [ObjectIdentifier: WeakContext] = [:]
        /// Main contexts with `.mainContext` (three-tier): with the auto-mergers, they merge
        /// remote commits.
        var threeTierMains: [ObjectIdentifier: WeakContext] = [:]
        var flushesOnTermination = false
        /// Whether something here receives remote commits (a main context, a stack-wide
        /// observer), and whether the store's history is followed for it yet.
        var wantsRemoteCommits = false
        var followsHistory = false
        /// Whether a new attempt to start following is scheduled (after one failed).
        var followRetryScheduled = false
    }

    struct WeakContext: Sendable {
        weak var context: ContextCore?
    }

    private struct StoreSettings: Equatable, Sendable {
        /// What makes two stores the same store (a file's path, a server's URL); `nil` in memory.
        let identity: String?
        /// How messages name the store: the path, or the server without its password.
        let label: String?
        let configuration: String?
        let autoMigrating: Bool
        let resetOnFailure: Bool
        var tracksHistory = false
        /// An SQLite file holds one configuration; a server database may hold several.
        var holdsOneConfiguration = true
    }

    /// A stack for `model`.
    ///
    /// - Parameters:
    ///   - model: the entities the stack stores.
    ///   - rootContext: `.shared` for a background root writer, `.none` to write on commit.
    public init(model: Model, rootContext: RootContext = .shared) throws {
        self.graph = model.graph
        self.rootContext = rootContext
    }

    /// Called with errors that no caller can receive: failed background saves and errors
    /// thrown inside `beginUpdate` and `perform` blocks. It runs on the thread where the error
    /// happened; hop to the main actor yourself if you update UI state.
    public var onError: (@Sendable (any Error) -> Void)? {
        get { state.withLock { $0.onError } }
        set { state.withLock { $0.onError = newValue } }
    }

    /// Adds an SQLite file store, creating the file and its tables when they do not exist.
    ///
    /// For example:
    ///
    /// ```swift
    /// try stack.addDatabaseStore(at: URL(fileURLWithPath: "people.sqlite"))
    /// ```
    ///
    /// The store uses write-ahead logging with `synchronous=NORMAL`: a crash of the application
    /// loses nothing committed to SQLite; a power loss may lose the last commits, never
    /// corrupting the file. Adding the same file again with the same settings does nothing.
    ///
    /// - Parameters:
    ///   - url: the file.
    ///   - configuration: the model configuration whose entities the file holds; `nil` for every
    ///     entity of the model (then it is the stack's only store).
    ///   - autoMigrating: migrate a file written by an earlier model version on open (see
    ///     Docs/Stores.md for what is inferred); `false` throws `StoreError.Code.modelMismatch`
    ///     for such a file instead.
    ///   - resetOnFailure: when the file holds an incompatible model, cannot be migrated, or is
    ///     a damaged SQLite database, empty it through SQLite (the files stay, so another
    ///     holder of them sees an empty store) and start an empty store in it instead of
    ///     throwing. A file that is not an SQLite database, or a database ContextStack did not
    ///     create, is never emptied (Docs/Stores.md, "Reset on failure").
    ///   - tracksHistory: record every save in the file's history, and follow the commits other
    ///     processes and stacks make to it (Docs/History.md). A file whose history another
    ///     stack turned on tracks it whatever this says. Only for a stack's only store.
    /// - Throws: `StoreError` saying what is wrong with the file (see Docs/Errors.md).
    public func addDatabaseStore(at url: URL, configuration: String? = nil, autoMigrating: Bool = true, resetOnFailure: Bool = false,
                                 tracksHistory: Bool = false) throws {
        // One file, however it is spelled (`a/../store.sqlite`, a symbolic link to it).
        let file = url.standardizedFileURL.resolvingSymlinksInPath()
        let settings = StoreSettings(identity: file.path, label: "the file \(file.path)", configuration: configuration,
                                     autoMigrating: autoMigrating, resetOnFailure: resetOnFailure, tracksHistory: tracksHistory)
        try addSQLiteStore(settings, url: file)
    }

    /// Adds an in-memory store: fast, private to this stack, gone when the stack is.
    ///
    /// - Parameter configuration: the model configuration whose entities it holds; `nil` for
    ///   every entity of the model (then it is the stack's only store).
    public func addInMemoryStore(configuration: String? = nil) throws {
        try addSQLiteStore(StoreSettings(identity: nil, label: nil, configuration: configuration, autoMigrating: true, resetOnFailure: false),
                           url: nil)
    }

    private func addSQLiteStore(_ settings: StoreSettings, url: URL?) throws {
        let options = SQLiteStore.OpenOptions(autoMigrating: settings.autoMigrating, resetOnFailure: settings.resetOnFailure,
                                              tracksHistory: settings.tracksHistory)
        try addStore(settings) { schema, existing in
            if let existing {
                guard let store = existing as? SQLiteStore else {
                    throw StoreError(.alreadyAdded, "The stack already has a store of another kind; SQLite stores can only be added beside SQLite stores.")
                }
                try store.attach(schema: schema, url: url, options: options)
                return nil
            }
            return try SQLiteStore(graph: graph, schema: schema, url: url, options: options,
                                   writesInBackground: rootContext == .shared, tracer: tracer) { [weak self] error in
                self?.report(error)
            }
        }
    }

    /// Adds a store of another kind (the PostgreSQL store's `addPostgresStore`), with the
    /// checks every store shares: a known configuration, one store per entity, the same store
    /// not added twice with other settings.
    ///
    /// - Parameters:
    ///   - identity: what makes two stores the same (a server URL); `label` names it in messages.
    ///   - open: makes the store for `schema`, or — when the stack already has one (`existing`) —
    ///     adds `schema` to it and returns `nil`.
    package func addStore(identity: String, label: String, configuration: String?, autoMigrating: Bool,
                          open: (_ schema: StoreSchema, _ existing: (any ObjectStore)?) throws -> (any ObjectStore)?) throws {
        try addStore(StoreSettings(identity: identity, label: label, configuration: configuration, autoMigrating: autoMigrating,
                                   resetOnFailure: false, holdsOneConfiguration: false), open: open)
    }

    private func addStore(_ settings: StoreSettings, open: (StoreSchema, (any ObjectStore)?) throws -> (any ObjectStore)?) throws {
        if let configuration = settings.configuration, graph.configurations[configuration] == nil {
            throw StoreError(.unknownConfiguration, "The model has no configuration named '\(configuration)'; it has \(graph.configurations.keys.sorted()).")
        }
        // Adding stores is setup: one at a time, so two adds cannot both pass the checks below.
        try addingStore.withLock { _ in
            let existing = state.withLock { $0.storeSettings }
            let sameLocation = existing.filter { settings.identity != nil && $0.identity == settings.identity }
            if let same = sameLocation.first(where: { $0.configuration == settings.configuration || settings.holdsOneConfiguration }) {
                if same == settings { return }
                throw StoreError(.alreadyAdded, "This stack already has \(same.label ?? "that store") as a store, with other settings (configuration \(same.configuration ?? "nil"), autoMigrating \(same.autoMigrating), resetOnFailure \(same.resetOnFailure)).")
            }
            let schema = StoreSchema(graph: graph, configuration: settings.configuration)
            for other in existing {
                if other.configuration == nil || settings.configuration == nil {
                    throw StoreError(.alreadyAdded, "A store without a configuration holds every entity, so it must be the stack's only store; give each store a configuration of the model.")
                }
                let otherEntities = StoreSchema(graph: graph, configuration: other.configuration).entityNames
                if let shared = schema.entityNames.intersection(otherEntities).sorted().first {
                    throw StoreError(.alreadyAdded, "\(shared) is already held by the store for configuration '\(other.configuration ?? "")' (\(other.label ?? "in memory")); an entity lives in one store of a stack.")
                }
            }
            if let store = try open(schema, state.withLock({ $0.store })) {
                state.withLock { $0.store = store }
                followHistoryIfWanted()
            }
            state.withLock { $0.storeSettings.append(settings) }
        }
    }

    /// Held while a store is added.
    private let addingStore = Locked(())

    /// The stack's store; a precondition failure naming the fix when there is none.
    package var store: any ObjectStore {
        guard let store = state.withLock({ $0.store }) else {
            preconditionFailure("The stack has no store yet: call `try stack.addDatabaseStore(at: url)` or `try stack.addInMemoryStore()` before fetching or saving.")
        }
        return store
    }

    package var hasStore: Bool { state.withLock { $0.store != nil } }

    /// Hands an error to `onError`, if set.
    package func report(_ error: any Error) {
        state.withLock { $0.onError }?(error)
    }

    func makeContextID() -> ContextID {
        state.withLock { state in
            defer { state.nextContextID += 1 }
            return ContextID(rawValue: state.nextContextID)
        }
    }

    /// Registers a main context that merges every save of the root.
    func addAutoMerger(_ context: ContextCore) {
        state.withLock { $0.autoMergers[ObjectIdentifier(context)] = WeakContext(context: context) }
    }

    /// Says that something of this stack receives remote commits: the store's history is
    /// followed from then on (a stack with only `Context`s never opens the watcher's connection).
    func wantRemoteCommits() {
        state.withLock { $0.wantsRemoteCommits = true }
        followHistoryIfWanted()
    }

    /// Starts following the store's history once something wants remote commits. If it cannot
    /// start (the newest transaction cannot be read: the server is down, say), the error goes
    /// to `onError`, and it tries again by itself on a background queue — after half a second,
    /// then twice as long each time up to 30 seconds, for as long as it fails — and, at once,
    /// whenever something else wants remote commits (a `MainContext`, `observeCommit`,
    /// `allCommits`). Only the first failure of such a run is reported. Until it starts, no
    /// remote commit is delivered; from the moment it does, every later one is.
    ///
    /// `failures`: how many attempts of this run have failed before this one.
    private func followHistoryIfWanted(failures: Int = 0) {
        let store = state.withLock { state -> (any ObjectStore)? in
            guard state.wantsRemoteCommits, !state.followsHistory, let store = state.store, store.tracksHistory else { return nil }
            state.followsHistory = true
            return store
        }
        guard let store else { return }
        do {
            try store.followHistory { [weak self] transactions in self?.receiveRemote(transactions) }
        } catch {
            let schedule = state.withLock { state -> Bool in
                state.followsHistory = false
                defer { state.followRetryScheduled = true }
                return !state.followRetryScheduled
            }
            // A run of failures is reported once: by its first attempt, not by the retries, nor
            // by an attempt something else made while a retry was due.
            if failures == 0 && schedule { report(error) }
            guard schedule else { return }
            let delay = min(0.5 * Double(1 << min(failures, 6)), 30)
            DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + delay) { [weak self] in
                guard let self else { return }
                self.state.withLock { $0.followRetryScheduled = false }
                self.followHistoryIfWanted(failures: failures + 1)
            }
        }
    }

    /// Registers a three-tier main context, for remote commits.
    func addThreeTierMain(_ context: ContextCore) {
        state.withLock { $0.threeTierMains[ObjectIdentifier(context)] = WeakContext(context: context) }
    }

    /// Hands commits other stacks made to every main context that merges, then to observers.
    private func receiveRemote(_ transactions: [RemoteTransaction]) {
        let contexts = state.withLock { state in
            state.autoMergers = state.autoMergers.filter { $0.value.context != nil }
            state.threeTierMains = state.threeTierMains.filter { $0.value.context != nil }
            return (state.autoMergers.values.compactMap(\.context) + state.threeTierMains.values.compactMap(\.context))
        }
        for remote in transactions {
            for context in contexts { context.handOver(remote.changes) }
            commits.publish(Commit(remote: remote.transaction, graph: graph))
        }
    }

    /// Hands a root save to every auto-merging main context (but `except`, which has it).
    func handOverToAutoMergers(_ changes: ChangeSet, except: ContextCore?) {
        let contexts = state.withLock { state in
            state.autoMergers = state.autoMergers.filter { $0.value.context != nil }
            return state.autoMergers.values.compactMap(\.context)
        }
        for context in contexts where context !== except { context.handOver(changes) }
    }

    /// Calls `block` on the main actor after every commit of every context of this stack,
    /// once the commit is visible at its target — and after every remote commit, when the
    /// store tracks history (`Commit.isRemote`, Docs/History.md).
    ///
    /// - Returns: a token; observing stops when it is released or cancelled.
    public func observeCommit(_ block: @escaping @MainActor @Sendable (Commit) -> Void) -> CommitObservation {
        wantRemoteCommits()
        return commits.addObserver(origin: nil, block)
    }

    /// Every commit of every context of this stack, as an asynchronous sequence (delivered on
    /// the main actor, in commit order), remote ones included. Iteration ends when the
    /// consumer stops iterating.
    public var allCommits: AsyncStream<Commit> {
        wantRemoteCommits()
        return commits.stream(origin: nil)
    }

    /// Waits until everything committed before the call is in SQLite.
    ///
    /// - Throws: the first error of a background save that failed since the last flush.
    public func flush() async throws {
        guard hasStore else { return }
        try await store.flush()
    }

    /// Blocks until everything committed before the call is in SQLite; see `flush()`.
    public func flushAndWait() throws {
        guard hasStore else { return }
        try store.flushAndWait()
    }
}

/// The contexts reach the model, the store and `onError` through this conformance.
extension Stack: ContextHost {}
