import _ContextStackCore

/// An update's pending objects (inserted or changed, not yet committed) by their values of
/// each uniqueness constraint, for `fetchOrCreate`: so that finding the pending object that
/// holds a unique value costs a look-up, not an evaluation of every pending object. Without
/// it, an import of N objects by `fetchOrCreate` in one update is quadratic (CoreStore #502:
/// 1–2 s became 4–5 minutes).
///
/// Property setters write into objects without telling anyone which value changed; they do
/// tell the context that the object changes (`ContextCore.markChanged`). So the index is
/// kept lazily: the context notes every object that may have changed since the last look-up
/// (`touched`), and a look-up files those again under their current values first. Between
/// look-ups, any number of writes cost one array append each.
struct PendingUniqueIndex {
    private struct Key: Hashable {
        let constraint: ObjectIdentifier
        let values: [Value]
    }

    private var objects: [Key: [ManagedObject]] = [:]
    /// The keys each object is filed under, to take it out when it changes.
    private var keys: [ObjectID: [Key]] = [:]
    /// Objects that may have changed since they were last filed.
    private(set) var touched: [ManagedObject] = []

    /// Notes that `object` may be about to change. Setting several properties of one object
    /// in a row notes it once.
    mutating func touch(_ object: ManagedObject) {
        if touched.last !== object { touched.append(object) }
    }

    /// Files every pending object of `changed`.
    init(_ changed: [ObjectID: ManagedObject]) {
        for object in changed.values { file(object) }
    }

    /// The pending objects whose values of `constraint` are `values`, as of now.
    mutating func objects(_ constraint: UniqueConstraint, _ values: [Value], pending changed: [ObjectID: ManagedObject]) -> [ManagedObject] {
        if !touched.isEmpty {
            let refiling = touched
            touched.removeAll(keepingCapacity: true)
            for object in refiling {
                let current = object.state != .deleted && changed[object.objectID] === object ? Self.keys(of: object) : []
                guard current != keys[object.objectID] ?? [] else { continue }
                unfile(object.objectID)
                file(object, under: current)
            }
        }
        return objects[Key(constraint: ObjectIdentifier(constraint), values: values)] ?? []
    }

    /// The keys `object` belongs under now: one per constraint whose values it all holds.
    private static func keys(of object: ManagedObject) -> [Key] {
        object.entity.uniqueConstraints.compactMap { constraint in
            constraint.key(in: object.values).map { Key(constraint: ObjectIdentifier(constraint), values: $0) }
        }
    }

    private mutating func file(_ object: ManagedObject) {
        guard object.state != .deleted, keys[object.objectID] == nil else { return }
        file(object, under: Self.keys(of: object))
    }

    private mutating func file(_ object: ManagedObject, under filed: [Key]) {
        guard !filed.isEmpty else { return }
        for key in filed { objects[key, default: []].append(object) }
        keys[object.objectID] = filed
    }

    private mutating func unfile(_ id: ObjectID) {
        guard let filed = keys.removeValue(forKey: id) else { return }
        for key in filed {
            objects[key]?.removeAll { $0.objectID == id }
            if objects[key]?.isEmpty == true { objects[key] = nil }
        }
    }
}

extension ContextCore {
    /// The object `fetchOrCreate` finds for `condition` when the condition pins the values of
    /// `constraint`, as `fetchFirst` would find it, without evaluating every pending object:
    /// a stored row (or one queued in the store) matching the condition whose object this
    /// update has not changed, else a pending object holding `values` (through the index)
    /// whose assigned values all match. A stored row this update changed is judged by its
    /// current values, through the index, like any pending object.
    ///
    /// `query`: `condition` compiled (`compile(type, condition, nil)`), which `fetchOrCreate`
    /// needs anyway to check the condition's keys and values.
    package func uniqueMatch<T: ManagedObject>(_ type: T.Type, _ condition: Condition, compiled query: CompiledQuery, entity: ResolvedEntity,
                                               constraint: UniqueConstraint, values: [Value], assignments: [(Int, Value)]) throws -> T? {
        // The stored rows come whole, with their objects, in one read (their IDs first and then
        // each object by ID took two). A row whose object this update changed is left for the
        // index below, which judges it by its current values.
        beginRead()
        defer { endRead() }
        let stored = try fetchObjects(type, FetchRequest(condition: condition, orderBy: nil, options: .noPendingChanges), compiled: query)
        if let object = stored.first(where: { changed[$0.objectID] == nil }) { return object }
        if pendingUnique == nil { pendingUnique = PendingUniqueIndex(changed) }
        for object in pendingUnique!.objects(constraint, values, pending: changed)
        where entity.includes(object.entity) && object.state != .deleted && changed[object.objectID] === object {
            if assignments.allSatisfy({ object.values[$0.0] == $0.1 }), let object = object as? T { return object }
        }
        return nil
    }
}
