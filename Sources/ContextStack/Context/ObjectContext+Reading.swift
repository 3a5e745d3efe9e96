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
        return try fetchObjects(query, offset: max(0, options.offset ?? 0), limit: options.limit.map { max(0, $0) }).compactMap { $0 as? T }
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
