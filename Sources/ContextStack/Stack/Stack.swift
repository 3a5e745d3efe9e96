import Foundation

/// The top of ContextStack: a model, the store that holds it, and the root writer.
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

    let graph: ModelGraph
    /// The stack's root: `.shared` or `.none`.
    public let rootContext: RootContext
    private let state = Locked(State())
    /// Delivers commits to observers on the main actor.
    let commits = CommitHub()
    /// Shared by the stack's stores: `trace(_:)` sets what it calls.
    let tracer = StatementTracer()

    /// Hands the SQL of every statement the stack's stores run to `body`, on the thread that
    /// runs it; `nil` stops tracing. Bound values appear as `?` and never reach the trace.
    ///
    /// For example: `stack.trace { sql in print(sql) }` — to see what a fetch with `.prefetch`
    /// or `.batch` costs, or to count statements in a test.
    public func trace(_ body: (@Sendable (String) -> Void)?) {
        tracer.set(body)
    }

    private struct State: Sendable {
        var store: Store?
        var storeSettings: StoreSettings?
        var onError: (@Sendable (any Error) -> Void)?
        var nextContextID: UInt64 = 1
        /// Main contexts with `.rootContext(autoMerge: true)`: they merge every save of the root.
        var autoMergers: [ObjectIdentifier: WeakContext] = [:]
        var flushesOnTermination = false
    }

    struct WeakContext: Sendable {
        weak var context: ObjectContext?
    }

    private struct StoreSettings: Equatable, Sendable {
        let path: String?
        let configuration: String?
        let autoMigrating: Bool
        let resetOnFailure: Bool
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
    /// corrupting the file.
    ///
    /// - Parameters:
    ///   - url: the file.
    ///   - configuration: a configuration name of the model (checked to exist). A stack holds
    ///     one store today, and that store holds every entity of the model.
    ///   - autoMigrating: accepted for the migration feature; a store written by a different
    ///     model currently throws `StoreError.Code.modelMismatch` either way.
    ///   - resetOnFailure: replace a store written by a different model with an empty one
    ///     (every table in the file is dropped) instead of throwing.
    /// - Throws: `StoreError` when the file cannot be opened or holds another model.
    public func addDatabaseStore(at url: URL, configuration: String? = nil, autoMigrating: Bool = true, resetOnFailure: Bool = false) throws {
        try addStore(StoreSettings(path: url.standardizedFileURL.path, configuration: configuration,
                                   autoMigrating: autoMigrating, resetOnFailure: resetOnFailure), url: url)
    }

    /// Adds an in-memory store: fast, private to this stack, gone when the stack is.
    public func addInMemoryStore(configuration: String? = nil) throws {
        try addStore(StoreSettings(path: nil, configuration: configuration, autoMigrating: true, resetOnFailure: false), url: nil)
    }

    private func addStore(_ settings: StoreSettings, url: URL?) throws {
        if let configuration = settings.configuration, graph.configurations[configuration] == nil {
            throw StoreError(.unknownConfiguration, "The model has no configuration named '\(configuration)'; it has \(graph.configurations.keys.sorted()).")
        }
        let existing = state.withLock { $0.storeSettings }
        if let existing {
            if existing == settings && settings.path != nil { return }
            throw StoreError(.alreadyAdded, "This stack already has a store (\(existing.path ?? "in memory")); a stack holds one store.")
        }
        let store = try Store(graph: graph, url: url, resetOnFailure: settings.resetOnFailure,
                              writesInBackground: rootContext == .shared, tracer: tracer) { [weak self] error in
            self?.report(error)
        }
        try state.withLock { state in
            guard state.store == nil else {
                throw StoreError(.alreadyAdded, "This stack already has a store; a stack holds one store.")
            }
            state.store = store
            state.storeSettings = settings
        }
    }

    /// The stack's store; a precondition failure naming the fix when there is none.
    var store: Store {
        guard let store = state.withLock({ $0.store }) else {
            preconditionFailure("The stack has no store yet: call `try stack.addDatabaseStore(at: url)` or `try stack.addInMemoryStore()` before fetching or saving.")
        }
        return store
    }

    var hasStore: Bool { state.withLock { $0.store != nil } }

    /// Hands an error to `onError`, if set.
    func report(_ error: any Error) {
        state.withLock { $0.onError }?(error)
    }

    func makeContextID() -> ContextID {
        state.withLock { state in
            defer { state.nextContextID += 1 }
            return ContextID(rawValue: state.nextContextID)
        }
    }

    /// Registers a main context that merges every save of the root.
    func addAutoMerger(_ context: ObjectContext) {
        state.withLock { $0.autoMergers[ObjectIdentifier(context)] = WeakContext(context: context) }
    }

    /// Hands a root save to every auto-merging main context (but `except`, which has it).
    func handOverToAutoMergers(_ changes: ChangeSet, except: ObjectContext?) {
        let contexts = state.withLock { state in
            state.autoMergers = state.autoMergers.filter { $0.value.context != nil }
            return state.autoMergers.values.compactMap(\.context)
        }
        for context in contexts where context !== except { context.handOver(changes) }
    }

    /// Calls `block` on the main actor after every commit of every context of this stack,
    /// once the commit is visible at its target.
    ///
    /// - Returns: a token; observing stops when it is released or cancelled.
    public func observeCommit(_ block: @escaping @MainActor @Sendable (Commit) -> Void) -> CommitObservation {
        commits.addObserver(origin: nil, block)
    }

    /// Every commit of every context of this stack, as an asynchronous sequence (delivered on
    /// the main actor, in commit order). Iteration ends when the consumer stops iterating.
    public var allCommits: AsyncStream<Commit> { commits.stream(origin: nil) }

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
