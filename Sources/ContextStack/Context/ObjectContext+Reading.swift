/// The typed reads shared by `MainContext` and `Update`.
extension ObjectContext {
    func compile<T: ManagedObject>(_ type: T.Type, _ condition: Condition?, _ orderBy: OrderBy?) throws -> CompiledQuery {
        try CompiledQuery(entity: graph.entity(for: type), condition: condition, orderBy: orderBy)
    }

    func fetchAll<T: ManagedObject>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?, options: FetchOptions) throws -> [T] {
        checkExecution("fetchAll(\(T.self).self, …)")
        beginRead()
        defer { endRead() }
        let query = try compile(type, condition, orderBy)
        return typed(try fetchObjects(query, offset: max(0, options.offset ?? 0), limit: options.limit.map { max(0, $0) }), as: type)
    }

    /// The objects as `T`. A fetch of `T` makes only `T`s (and sub-entities, its subclasses);
    /// an object of exactly `T` skips the generic `as?`, whose metadata lookups took a sixth
    /// of a 100,000-object fetch.
    private func typed<T: ManagedObject>(_ objects: [ManagedObject], as type: T.Type) -> [T] {
        var result: [T] = []
        result.reserveCapacity(objects.count)
        let exact = ObjectIdentifier(type)
        for object in objects {
            if ObjectIdentifier(Swift.type(of: object)) == exact {
                result.append(unsafeDowncast(object, to: T.self))
            } else if let object = object as? T {
                result.append(object)
            }
        }
        return result
    }

    func fetchFirst<T: ManagedObject>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?, options: FetchOptions) throws -> T? {
        checkExecution("fetch(\(T.self).self, …)")
        beginRead()
        defer { endRead() }
        let query = try compile(type, condition, orderBy)
        if let limit = options.limit, limit <= 0 { return nil }
        return try fetchObjects(query, offset: max(0, options.offset ?? 0), limit: 1).first as? T
    }

    func fetchCount<T: ManagedObject>(_ type: T.Type, _ condition: Condition?) throws -> Int {
        checkExecution("fetchCount(\(T.self).self, …)")
        beginRead()
        defer { endRead() }
        return try fetchCount(compile(type, condition, nil))
    }

    func fetchIDs<T: ManagedObject>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?, options: FetchOptions) throws -> [ObjectID] {
        checkExecution("fetchIDs(\(T.self).self, …)")
        beginRead()
        defer { endRead() }
        let query = try compile(type, condition, orderBy)
        return try fetchRows(query, offset: max(0, options.offset ?? 0), limit: options.limit.map { max(0, $0) }).map(\.id)
    }

    func fetch<T: ManagedObject>(_ type: T.Type, id: ObjectID) throws -> T? {
        checkExecution("fetch(\(T.self).self, id:)")
        beginRead()
        defer { endRead() }
        let entity = graph.entity(for: type)
        guard id.rootEntity === entity.rootDescription else { return nil }
        return try object(for: id) as? T
    }
}
