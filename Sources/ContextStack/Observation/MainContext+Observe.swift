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
    /// even when nothing changed (not when the result is empty). The sequence ends when the consumer stops iterating
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
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .unbounded)
        let results: FetchedResults<T>
        do {
            results = try FetchedResults(context: self, type, condition, orderBy: orderBy, options: options)
        } catch {
            stack.report(error)
            continuation.finish()
            return stream
        }
        continuation.yield(element(results))
        results.onChange = { [unowned results] _ in continuation.yield(element(results)) }
        // A reset that changed nothing the results show still let their objects go: the
        // consumer gets the new ones (a per-consumer context resets at every commit it follows).
        results.afterQuietReset = { [unowned results] in
            if results.count > 0 { continuation.yield(element(results)) }
        }
        // The results live as long as the consumer iterates: ending drops them, and with them
        // their commit observation.
        let holder = Locked<FetchedResults<T>?>(results)
        continuation.onTermination = { _ in holder.withLock { $0 = nil } }
        return stream
    }
}
