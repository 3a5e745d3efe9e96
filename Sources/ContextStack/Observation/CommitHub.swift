import Dispatch
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// Delivers commits to observers on the main actor, in commit order: first resetting the main
/// contexts that asked to be reset on commits of that origin (or on every remote commit), then updating live results and
/// object observations, then calling observers, then feeding `commits` streams — so a commit
/// observer already sees every `FetchedResults` reflect the commit.
final class CommitHub: Sendable {
    typealias Observer = @MainActor @Sendable (Commit) -> Void

    private struct State {
        var nextID: UInt64 = 1
        /// Observers by token, with the origin they watch (`nil`: every commit).
        var observers: [UInt64: (origin: ContextID?, block: Observer)] = [:]
        /// Live results and object observations: every commit, before observers.
        var live: [UInt64: Observer] = [:]
        var streams: [UInt64: (origin: ContextID?, continuation: AsyncStream<Commit>.Continuation)] = [:]
        /// Resets to run before observers of a commit from the origin (`resetOnCommitOf:`).
        var resetters: [UInt64: (origin: ContextID, reset: @MainActor @Sendable (Commit) -> Void)] = [:]
    }

    private let state = Locked(State())

    /// How many commits have been delivered so far, counting the one being delivered: a main
    /// context reset for a commit notes it, so that its live results, which the reset
    /// reloaded, do not take that same commit in again (`FetchedResults.process`).
    @MainActor private(set) var deliveries: UInt64 = 0

    /// Publishes a commit from any thread; delivery happens on the main actor, to those
    /// registered when it was published, and only to them: a commit is published once it is
    /// visible, so what registers later (live results about to fetch) reads it, and must not
    /// hear of it as news — nor hear of it only when some other listener happened to exist.
    func publish(_ makeCommit: @autoclosure () -> Commit) {
        // Registrations take increasing IDs under the lock: those below `horizon` were there.
        let horizon = state.withLock { state in
            state.observers.isEmpty && state.streams.isEmpty && state.resetters.isEmpty && state.live.isEmpty ? nil : state.nextID
        }
        // Nobody listens: skip making the Commit (its ID lists cost as much as the change set).
        guard let horizon else { return }
        let commit = makeCommit()
        DispatchQueue.main.async { [self] in
            MainActor.assumeIsolated { deliver(commit, to: horizon) }
        }
    }

    @MainActor private func deliver(_ commit: Commit, to horizon: UInt64) {
        deliveries += 1
        let (resets, live, observers, streams) = state.withLock { state in
            let origin: ContextID? = commit.origin
            // A remote commit resets every per-consumer context: its source may be anywhere.
            let resets: [@MainActor @Sendable (Commit) -> Void] = state.resetters
                .filter { $0.key < horizon && (commit.isRemote || $0.value.origin == origin) }.map(\.value.reset)
            let live: [Observer] = state.live.filter { $0.key < horizon }.sorted { $0.key < $1.key }.map(\.value)
            let observers: [Observer] = state.observers
                .filter { $0.key < horizon && ($0.value.origin == nil || $0.value.origin == origin) }
                .sorted { $0.key < $1.key }.map(\.value.block)
            let streams: [AsyncStream<Commit>.Continuation] = state.streams
                .filter { $0.key < horizon && ($0.value.origin == nil || $0.value.origin == origin) }.map(\.value.continuation)
            return (resets, live, observers, streams)
        }
        for reset in resets { reset(commit) }
        for update in live { update(commit) }
        for observer in observers { observer(commit) }
        for stream in streams { stream.yield(commit) }
    }

    func addObserver(origin: ContextID?, _ block: @escaping Observer) -> CommitObservation {
        let id = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.observers[id] = (origin, block)
            return id
        }
        return CommitObservation(hub: self, id: id)
    }

    /// Registers live results or an object observation: told of every commit, after resets
    /// and before observers.
    func addLiveObserver(_ block: @escaping Observer) -> CommitObservation {
        let id = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.live[id] = block
            return id
        }
        return CommitObservation(hub: self, id: id)
    }

    /// How many live results and object observations are registered (for tests).
    var liveObserverCount: Int { state.withLock { $0.live.count } }

    /// How many per-consumer contexts are registered to reset (for tests).
    var resetterCount: Int { state.withLock { $0.resetters.count } }

    /// How many `commits` and `allCommits` streams are registered (for tests).
    var streamCount: Int { state.withLock { $0.streams.count } }

    func stream(origin: ContextID?) -> AsyncStream<Commit> {
        let (stream, continuation) = AsyncStream<Commit>.makeStream(bufferingPolicy: .unbounded)
        let id = state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.streams[id] = (origin, continuation)
            return id
        }
        continuation.onTermination = { [weak self] _ in self?.remove(id) }
        return stream
    }

    /// Registers a reset to run before observers of commits from `origin`; returns a token.
    func addResetter(origin: ContextID, _ reset: @escaping @MainActor @Sendable (Commit) -> Void) -> UInt64 {
        state.withLock { state in
            let id = state.nextID
            state.nextID += 1
            state.resetters[id] = (origin, reset)
            return id
        }
    }

    func remove(_ id: UInt64) {
        state.withLock { state in
            state.observers[id] = nil
            state.live[id] = nil
            state.streams[id] = nil
            state.resetters[id] = nil
        }
    }
}

/// A commit observer's registration: observing stops when it is released (or cancelled).
///
/// Keep it as long as you want commits:
///
/// ```swift
/// let token = updater.observeCommit { commit in reload(commit.updated) }
/// ```
public final class CommitObservation: Sendable {
    private let hub: CommitHub
    private let id: UInt64

    init(hub: CommitHub, id: UInt64) {
        self.hub = hub
        self.id = id
    }

    /// Stops observing now.
    public func cancel() { hub.remove(id) }

    deinit { hub.remove(id) }
}
