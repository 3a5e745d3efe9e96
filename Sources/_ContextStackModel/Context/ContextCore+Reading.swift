import _ContextStackCore

/// The typed reads shared by `MainContext` and `Update`.
extension ContextCore {
    package func compile<T: ManagedObject>(_ type: T.Type, _ condition: Condition?, _ orderBy: OrderBy?,
                                   includesSubEntities: Bool = true) throws -> CompiledQuery {
        try CompiledQuery(entity: graph.entity(for: type), condition: condition, orderBy: orderBy,
                          includesSubEntities: includesSubEntities, dialect: store.dialect)
    }

    package func fetchAll<T: ManagedObject>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?, options: FetchOptions) throws -> [T] {
        checkExecution("fetchAll(\(T.self).self, …)")
        beginRead()
        defer { endRead() }
        return try fetchObjects(type, FetchRequest(condition: condition, orderBy: orderBy, options: options))
    }

    /// `compiled`: `condition` and `orderBy`, already compiled by the caller
    /// (`compile(type, condition, orderBy)`).
    package func fetchFirst<T: ManagedObject>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?, options: FetchOptions,
                                              compiled: CompiledQuery? = nil) throws -> T? {
        checkExecution("fetch(\(T.self).self, …)")
        beginRead()
        defer { endRead() }
        var request = FetchRequest(condition: condition, orderBy: orderBy, options: options)
        request.limit = min(request.limit ?? 1, 1)
        return try fetchObjects(type, request, compiled: compiled).first
    }

    package func fetchCount<T: ManagedObject>(_ type: T.Type, _ condition: Condition?) throws -> Int {
        checkExecution("fetchCount(\(T.self).self, …)")
        beginRead()
        defer { endRead() }
        return try fetchCount(compile(type, condition, nil))
    }

    package func fetchIDs<T: ManagedObject>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?, options: FetchOptions) throws -> [ObjectID] {
        checkExecution("fetchIDs(\(T.self).self, …)")
        beginRead()
        defer { endRead() }
        let request = FetchRequest(condition: condition, orderBy: orderBy, options: options)
        let query = try compile(type, request.condition, request.orderBy, includesSubEntities: request.includesSubEntities)
        return try read { session in
            var reader = RowReader(session: session, context: request.includesPendingChanges ? self : nil)
            return try selectRows(query, offset: request.offset, limit: request.limit, columns: [], reader: &reader).rows.map(\.id)
        }
    }

    package func fetch<T: ManagedObject>(_ type: T.Type, id: ObjectID) throws -> T? {
        checkExecution("fetch(\(T.self).self, id:)")
        beginRead()
        defer { endRead() }
        let entity = graph.entity(for: type)
        guard id.rootEntity === entity.rootDescription else { return nil }
        if kind == .main && registered(id) != nil { try catchUp() }
        return try object(for: id) as? T
    }

    /// The objects `request` asks for: whole, partly loaded (`propertiesOnly`) or faults
    /// (`noPropertyValues`, `batchSize`), with the relationships it prefetches.
    ///
    /// `compiled`: `request`'s condition and order, already compiled by the caller.
    func fetchObjects<T: ManagedObject>(_ type: T.Type, _ request: FetchRequest, compiled: CompiledQuery? = nil) throws -> [T] {
        let entity = graph.entity(for: type)
        let query = try compiled ?? compile(type, request.condition, request.orderBy, includesSubEntities: request.includesSubEntities)
        let prefetch = try prefetchPaths(request.prefetch, in: entity)
        // Which columns the fetch reads: all, some (`propertiesOnly`), or none (faults).
        var columns: [Int]?
        var loadedSlots: Set<Int> = []
        if !request.includesPropertyValues || request.batchSize != nil {
            columns = []
        } else if let keys = request.propertiesOnly {
            var wanted: [Int] = []
            for key in keys {
                guard let property = entity.property(named: key), property.isStored else {
                    throw QueryError(.unknownKey, ".propertiesOnly([\"\(key)\"]): \(entity.name) has no stored attribute or to-one relationship '\(key)'.", key: key, entity: entity.name)
                }
                loadedSlots.insert(property.slot)
                wanted.append(property.column)
            }
            for path in prefetch where path[0].isToOne {
                // Prefetching a to-one relationship needs its foreign key.
                if loadedSlots.insert(path[0].slot).inserted { wanted.append(path[0].column) }
            }
            for property in entity.properties where property.isToMany { loadedSlots.insert(property.slot) }
            columns = wanted.sorted()
        }
        if !prefetch.isEmpty { prefetched = PrefetchCache(generation: generation) }
        // Whole objects, nothing to prefetch and nothing pending to merge: the query alone
        // (`RowReader.select` runs one statement when nothing is pending to recheck).
        let oneStatement = columns == nil && prefetch.isEmpty && !query.filtersInMemory
            && query.hopChains.isEmpty && query.toManyUses.isEmpty
            && (!request.includesPendingChanges || changed.isEmpty)
        // The read returns `[ManagedObject]`, a type known here, so that the generic read it
        // goes through is specialized for it: for `[T]` the runtime looked its `Optional` up at
        // every fetch (`ObjectStore.withReadSession`).
        let objects = try read(shape: oneStatement ? .oneStatement : .statements) { session -> [ManagedObject] in
            var reader = RowReader(session: session, context: request.includesPendingChanges ? self : nil)
            if columns == nil && prefetch.isEmpty {
                // Whole objects and nothing to prefetch: each row becomes its object as it is
                // read, while its values are still in the processor's cache. Collecting the
                // rows first and making the objects in a second pass (and casting them in a
                // third) went through memory three times.
                var objects: [ManagedObject] = []
                // Every object registered from here on is held by `objects`.
                registry.dropGoneIfDue(alive: changed.count)
                registry.sweepsWhenGrowing = false
                defer { registry.sweepsWhenGrowing = true }
                // A query without an order or a window comes in key order: the objects are put
                // in it here (when the rows did not come in it) rather than have SQL sort rows
                // it read along another index.
                var previousKey = Int64.min
                var inKeyOrder = true
                // Nothing pending to merge: each row's values go from the connection into its
                // object (`materialize(_:_:reading:)`). Else the merged rows, one by one. The two
                // closures are written out: shared as local functions, which capture the loop's
                // state in boxes, they made a 100,000-object fetch 15 % slower (43 → 50 ms).
                let readInPlace = try reader.selectInPlace(query, offset: request.offset, limit: request.limit, keyOrderInMemory: true,
                                                           expecting: { count in
                                                               objects.reserveCapacity(count)
                                                               reserveRegistrations(count)
                                                           }) { id, entity, row in
                    if id.primaryKey < previousKey { inKeyOrder = false }
                    previousKey = id.primaryKey
                    objects.append(checked(materialize(id, entity, reading: row), is: T.self))
                }
                if !readInPlace {
                    try selectRows(query, offset: request.offset, limit: request.limit, columns: nil, keyOrderInMemory: true, reader: &reader,
                                   expecting: { count in
                                       objects.reserveCapacity(count)
                                       reserveRegistrations(count)
                                   }) { id, row in
                        if id.primaryKey < previousKey { inKeyOrder = false }
                        previousKey = id.primaryKey
                        objects.append(checked(materialize(id, row), is: T.self))
                    }
                }
                if !inKeyOrder && query.isInKeyOrderAlone(offset: request.offset, limit: request.limit) {
                    objects.sort { $0.objectID.primaryKey < $1.objectID.primaryKey }
                }
                return objects
            }
            let (rows, complete) = try selectRows(query, offset: request.offset, limit: request.limit, columns: columns, reader: &reader)
            reserveRegistrations(rows.count)
            if complete {
                let objects = rows.map { checked(materialize($0.id, $0.row), is: T.self) }
                if !prefetch.isEmpty { try loadPrefetch(prefetch, from: rows.map { ($0.id, $0.row) }, reader: &reader) }
                return objects
            }
            // Partly loaded objects prefetch now (they hold the foreign keys); faults when
            // their group loads.
            let partial = columns?.isEmpty == false
            if partial { try loadPrefetch(prefetch, from: rows.map { ($0.id, $0.row) }, reader: &reader) }
            let size = request.batchSize ?? 1
            var objects: [ManagedObject] = []
            objects.reserveCapacity(rows.count)
            for start in stride(from: 0, to: rows.count, by: size) {
                let batch = rows[start..<min(start + size, rows.count)]
                let group = FaultGroup(ids: batch.map(\.id), loadedSlots: loadedSlots, prefetch: partial ? [] : prefetch)
                for row in batch { objects.append(checked(materializeFault(row.id, row.row, group: group), is: T.self)) }
            }
            return objects
        }
        return reinterpret(objects, as: T.self)
    }
}

/// `object`, trapping unless it is a `T`, for a list that `reinterpret` hands out as `[T]`. A
/// fetch of `T` makes only `T`s (and sub-entities, its subclasses): an object of exactly `T`
/// skips the generic cast, whose metadata lookups took a sixth of a 100,000-object fetch.
@inline(__always)
private func checked<T: ManagedObject>(_ object: ManagedObject, is type: T.Type) -> ManagedObject {
    if ObjectIdentifier(Swift.type(of: object)) != ObjectIdentifier(type) { _ = object as! T }
    return object
}

/// `objects`, every one of which is a `T` (each went through `checked`), as a `[T]`, without
/// copying: an array of class references holds the references alone, laid out the same
/// whatever their class, and every element is a `T`. Appending to a `[T]` here instead, in
/// generic code that is not specialized across the module boundary, looked `Array<T>`'s
/// metadata up in the runtime's cache for every object: 4 % of a 100,000-object fetch.
private func reinterpret<T: ManagedObject>(_ objects: [ManagedObject], as type: T.Type) -> [T] {
    unsafeBitCast(objects, to: [T].self)
}
