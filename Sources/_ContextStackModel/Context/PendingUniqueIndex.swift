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
    /// A constraint's values in one object. Most constraints have one attribute, whose value
    /// needs no array of its own (an import of 100,000 objects by `fetchOrCreate` made three
    /// arrays per object for the index, a fifth of its time with their release at commit).
    private enum Key: Hashable {
        case single(ObjectIdentifier, Value)
        case compound(ObjectIdentifier, [Value])

        init(_ constraint: UniqueConstraint, _ values: [Value]) {
            self = values.count == 1 ? .single(ObjectIdentifier(constraint), values[0]) : .compound(ObjectIdentifier(constraint), values)
        }

        /// `constraint`'s key in a row of `values`; `nil` when one of them is NULL.
        init?(_ constraint: UniqueConstraint, in values: ContiguousArray<Value>) {
            if constraint.slots.count == 1 {
                let value = values[constraint.slots[0]]
                if value.isNull { return nil }
                self = .single(ObjectIdentifier(constraint), value)
            } else {
                guard let key = constraint.key(in: values) else { return nil }
                self = .compound(ObjectIdentifier(constraint), key)
            }
        }
    }

    /// What is filed under one key, or the keys one object is filed under: one, far more
    /// often than not (two pending objects with one key fail their commit unless one changes).
    fileprivate enum OneOrMore<Element> {
        case one(Element)
        case many([Element])

        var all: [Element] {
            switch self {
            case .one(let element): [element]
            case .many(let elements): elements
            }
        }

        func adding(_ element: Element) -> OneOrMore {
            .many(all + [element])
        }
    }

    private var objects: [Key: OneOrMore<ManagedObject>] = [:]
    /// The keys each object is filed under, to take it out when it changes.
    private var keys: [ObjectID: OneOrMore<Key>] = [:]
    /// Objects that may have changed since they were last filed.
    private(set) var touched: [ManagedObject] = []

    /// Notes that `object` may be about to change. Setting several properties of one object
    /// in a row notes it once.
    mutating func touch(_ object: ManagedObject) {
        if touched.last !== object { touched.append(object) }
    }

    /// Files every pending object of `changed`.
    init(_ changed: [ObjectID: ManagedObject]) {
        for object in changed.values where object.state != .deleted {
            if let filed = Self.keys(of: object) { file(object, under: filed) }
        }
    }

    /// The first pending object whose values of `constraint` are `values`, as of now, that
    /// `matches`.
    mutating func first(_ constraint: UniqueConstraint, _ values: [Value], pending changed: [ObjectID: ManagedObject],
                        where matches: (ManagedObject) -> Bool) -> ManagedObject? {
        if !touched.isEmpty {
            let refiling = touched
            touched.removeAll(keepingCapacity: true)
            for object in refiling {
                let current = object.state != .deleted && changed[object.objectID] === object ? Self.keys(of: object) : nil
                let filed = keys[object.objectID]
                guard current != filed else { continue }
                if let filed { unfile(object.objectID, from: filed) }
                if let current { file(object, under: current) }
            }
        }
        switch objects[Key(constraint, values)] {
        case nil: return nil
        case .one(let object): return matches(object) ? object : nil
        case .many(let objects): return objects.first(where: matches)
        }
    }

    /// The keys `object` belongs under now: one per constraint whose values it all holds.
    private static func keys(of object: ManagedObject) -> OneOrMore<Key>? {
        let constraints = object.entity.uniqueConstraints
        if constraints.count == 1 { return Key(constraints[0], in: object.values).map { .one($0) } }
        let all = constraints.compactMap { Key($0, in: object.values) }
        return all.isEmpty ? nil : all.count == 1 ? .one(all[0]) : .many(all)
    }

    private mutating func file(_ object: ManagedObject, under filed: OneOrMore<Key>) {
        func add(_ key: Key) {
            if let present = objects[key] { objects[key] = present.adding(object) } else { objects[key] = .one(object) }
        }
        switch filed {
        case .one(let key): add(key)
        case .many(let all): all.forEach(add)
        }
        keys[object.objectID] = filed
    }

    private mutating func unfile(_ id: ObjectID, from filed: OneOrMore<Key>) {
        keys[id] = nil
        for key in filed.all {
            let rest = (objects[key]?.all ?? []).filter { $0.objectID != id }
            objects[key] = rest.isEmpty ? nil : rest.count == 1 ? .one(rest[0]) : .many(rest)
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
        let pending = changed
        return pendingUnique!.first(constraint, values, pending: pending) { object in
            entity.includes(object.entity) && object.state != .deleted && pending[object.objectID] === object
                && object is T && assignments.allSatisfy { object.values[$0.0] == $0.1 }
        } as? T
    }
}

/// Two filings of an object are the same keys when `==`: `keys(of:)` never makes `.many` of one.
extension PendingUniqueIndex.OneOrMore: Equatable where Element: Equatable {}
