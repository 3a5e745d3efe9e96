import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// What one commit did to an observed object.
public struct ObjectChange: Sendable, CustomStringConvertible {
    /// The object.
    public let objectID: ObjectID
    /// The keys the commit changed (relationships by name; empty for a deletion).
    public let changedKeys: Set<String>
    /// True when the commit deleted the object: no further changes come, unless that commit
    /// then fails to save. What undoes it brings the object back, reported as a change of every
    /// key with `isDeleted` false.
    public let isDeleted: Bool
    /// The whole commit.
    public let commit: Commit

    public var description: String {
        isDeleted ? "ObjectChange(\(objectID) deleted)" : "ObjectChange(\(objectID) changed \(changedKeys.sorted()))"
    }
}

extension MainContext {
    /// Calls `block` on the main actor after each commit that changes or deletes `object`.
    ///
    /// For example:
    ///
    /// ```swift
    /// let watch = world.observe(knight) { change in
    ///     if change.isDeleted { dismiss() } else { refresh(change.changedKeys) }
    /// }
    /// ```
    ///
    /// The block runs after the commit is visible where this context reads it, before commit
    /// observers, and sees `object` with its new values in a context that merges. In a
    /// per-consumer context (`resetOnCommitOf:`) the reset before it has invalidated `object`:
    /// fetch it again by `change.objectID`.
    ///
    /// - Returns: a token; observing stops when it is released or cancelled.
    public func observe<T: ManagedObject>(_ object: T, _ block: @escaping @MainActor @Sendable (ObjectChange) -> Void) -> CommitObservation {
        core.checkRead(object)
        guard object.context === core else {
            preconditionFailure("\(object) belongs to another context: observe it through the MainContext it was fetched from.")
        }
        let id = object.objectID
        let entity = core.graph.entity(for: type(of: object))
        return stack.commits.addLiveObserver { commit in
            if commit.deleted.contains(id) {
                block(ObjectChange(objectID: id, changedKeys: [], isDeleted: true, commit: commit))
            } else if commit.undoesFailedSave && commit.inserted.contains(id) {
                // The commit that deleted it failed to save: it is back.
                block(ObjectChange(objectID: id, changedKeys: Set(entity.properties.map(\.name)), isDeleted: false, commit: commit))
            } else {
                let keys = commit.changedKeys(of: id)
                guard !keys.isEmpty else { return }
                block(ObjectChange(objectID: id, changedKeys: keys, isDeleted: false, commit: commit))
            }
        }
    }

    /// The objects matching `condition`, now and again after each commit that changes them,
    /// as an asynchronous sequence (CoreDataRepository's fetch subscriptions).
    ///
    /// For example:
    ///
    /// ```swift
    /// for await adults in world.fetchAllStream(Person.self, %"age" > 30, orderBy: .ascending("name")) {
    ///     show(adults)
    /// }
    /// ```
    ///
    /// The first element is the current result. Each later one follows a commit that inserted,
    /// deleted, moved or changed one of the objects — exactly when a `FetchedResults` with the
    /// same arguments reports a change — or a reset of the context, whose objects are new
    /// even when nothing changed (not when the result is empty). Each element is made when the
    /// consumer asks for it: one that falls behind gets the newest result once. The sequence ends when the consumer stops iterating
    /// (the observation is removed then). A condition that cannot run (an unknown key) ends
    /// the sequence at once and goes to `stack.onError`.
    public func fetchAllStream<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil,
                                                 options: FetchOptions = FetchOptions()) -> AsyncStream<[T]> {
        liveStream(type, condition, orderBy: orderBy, options: options) { $0.objects }
    }

    /// The first object matching `condition` in `orderBy` order (or `nil`), now and again after
    /// each commit that changes which object that is or changes it; see `fetchAllStream`.
    ///
    /// For example:
    ///
    /// ```swift
    /// for await monk in world.fetchStream(Person.self, %"name" == "Monk") { print(monk?.age ?? 0) }
    /// ```
    public func fetchStream<T: ManagedObject>(_ type: T.Type, _ condition: Condition? = nil, orderBy: OrderBy? = nil) -> AsyncStream<T?> {
        liveStream(type, condition, orderBy: orderBy, options: .limit(1)) { $0.objects.first }
    }

    private func liveStream<T: ManagedObject, Element: Sendable>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?, options: FetchOptions,
                                                                   _ element: @escaping @MainActor (FetchedResults<T>) -> Element) -> AsyncStream<Element> {
        let results: FetchedResults<T>
        do {
            results = try FetchedResults(context: self, type, condition, orderBy: orderBy, options: options)
        } catch {
            stack.report(error)
            return AsyncStream { nil }
        }
        // The results say when they changed; the element is made when the consumer asks for
        // it, on the main actor, from the results as they are then. An element made when the
        // change came could wait for the consumer behind another commit's delivery, and a
        // per-consumer context resets at every commit it follows: the consumer got objects
        // that reset had let go, and trapped on the first use.
        let feed = LiveFeed(results: results, element: element)
        results.onChange = { [weak feed] _ in feed?.changed() }
        // A reset that changed nothing the results show still let their objects go: the
        // consumer gets the new ones (not when there are none).
        results.afterQuietReset = { [weak feed, unowned results] in
            if results.count > 0 { feed?.changed() }
        }
        // The feed, and with it the results and their commit observation, live as long as
        // the consumer iterates.
        return AsyncStream { await feed.next() }
    }
}

/// What a fetch stream hands out: the current element first, then a fresh one each time the
/// results changed since the consumer last asked (changes that came meanwhile are one).
@MainActor private final class LiveFeed<T: ManagedObject, Element: Sendable> {
    private let results: FetchedResults<T>
    private let element: @MainActor (FetchedResults<T>) -> Element
    /// Rings once a change came, however many: what wakes `next`.
    private let rings: AsyncStream<Void>.Iterator
    private let ring: AsyncStream<Void>.Continuation
    /// How many changes came, and how many of them the last element showed (-1 before the
    /// first): a ring left from a change an element already showed is not a change.
    private var changeCount = 0
    private var shownCount = -1

    init(results: FetchedResults<T>, element: @escaping @MainActor (FetchedResults<T>) -> Element) {
        self.results = results
        self.element = element
        let (rings, ring) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        self.rings = rings.makeAsyncIterator()
        self.ring = ring
    }

    func changed() {
        changeCount += 1
        ring.yield()
    }

    /// The next element, or `nil` once the consumer's task is cancelled.
    func next() async -> Element? {
        // The iterator shares its stream's state: a copy waits as well as the original.
        var rings = self.rings
        while shownCount == changeCount {
            guard await rings.next(isolation: MainActor.shared) != nil else { return nil }
        }
        shownCount = changeCount
        return element(results)
    }
}
