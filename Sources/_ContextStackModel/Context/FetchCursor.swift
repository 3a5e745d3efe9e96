import _ContextStackCore

/// Objects of a fetch, loaded a batch at a time as you walk them: memory stays flat however
/// many objects match, because each batch is let go when the cursor moves on (objects you keep
/// stay alive, as always).
///
/// For example:
///
/// ```swift
/// var people = try world.fetchCursor(Person.self, %"age" > 18, orderBy: .ascending("name"), options: .batch(1000))
/// while let person = try people.next() {
///     total += person.age
/// }
/// ```
///
/// The cursor reads the matching objects' keys when it is made (8 bytes each) and each batch's rows in
/// one statement when it gets there. An object deleted below the context in between is
/// skipped. Use it only where its context runs (the main actor for a `MainContext`, the update
/// for an `Update`).
public struct FetchCursor<T: ManagedObject> {
    private let context: ContextCore
    /// The table every matching object is in (a fetch reads one entity and those below it,
    /// which share their root's table), and the objects' keys in order: half the memory of
    /// their IDs, which a million objects make 8 MB.
    private let root: EntityDescription
    private let keys: [Int64]
    private let batchSize: Int
    private let prefetch: [[Property]]
    private var position = 0
    private var batch: [ManagedObject] = []
    private var batchPosition = 0

    init(context: ContextCore, root: EntityDescription, keys: [Int64], batchSize: Int, prefetch: [[Property]]) {
        self.context = context
        self.root = root
        self.keys = keys
        self.batchSize = batchSize
        self.prefetch = prefetch
    }

    /// How many objects matched when the cursor was made.
    public var underestimatedCount: Int { keys.count }

    /// The next object, or `nil` at the end.
    ///
    /// - Throws: an error reading the next batch (the cursor can be asked again).
    public mutating func next() throws -> T? {
        context.checkExecution("FetchCursor.next()")
        while batchPosition == batch.count {
            guard position < keys.count else {
                batch = []
                batchPosition = 0
                return nil
            }
            let slice = keys[position..<min(position + batchSize, keys.count)].map { ObjectID(rootEntity: root, primaryKey: $0) }
            batch = []
            batchPosition = 0
            batch = try context.loadBatch(slice, prefetch: prefetch)
            position += slice.count
        }
        defer { batchPosition += 1 }
        return (batch[batchPosition] as! T)
    }

    /// Calls `body` with every remaining object, in order.
    public mutating func forEach(_ body: (T) throws -> Void) throws {
        while let object = try next() { try body(object) }
    }
}

extension ContextCore {
    /// A cursor over the objects `request` asks for.
    package func fetchCursor<T: ManagedObject>(_ type: T.Type, _ condition: Condition?, orderBy: OrderBy?, options: FetchOptions) throws -> FetchCursor<T> {
        checkExecution("fetchCursor(\(T.self).self, …)")
        beginRead()
        defer { endRead() }
        let request = FetchRequest(condition: condition, orderBy: orderBy, options: options)
        let query = try compile(type, request.condition, request.orderBy, includesSubEntities: request.includesSubEntities)
        let prefetch = try prefetchPaths(request.prefetch, in: graph.entity(for: type))
        let root = graph.entity(for: type).rootDescription
        let keys = try read { session in
            var reader = RowReader(session: session, context: request.includesPendingChanges ? self : nil)
            // The keys alone, as they are read: collecting the rows first (an ID, an entity and
            // an empty values array each, 32 bytes) and mapping them to IDs after held both
            // arrays at once, six times the keys' 8 bytes (70 MiB at the peak for a million).
            var keys: [Int64] = []
            try selectRows(query, offset: request.offset, limit: request.limit, columns: [], reader: &reader,
                           expecting: { keys.reserveCapacity($0) }) { id, _ in
                assert(id.rootEntity === root, "a fetch of \(T.self) read an object of another table: \(id)")
                keys.append(id.primaryKey)
            }
            return keys
        }
        return FetchCursor(context: self, root: root, keys: keys, batchSize: request.batchSize ?? 1000, prefetch: prefetch)
    }

    /// The objects of `ids` that still exist, in order, in one read, with their prefetches.
    func loadBatch(_ ids: [ObjectID], prefetch: [[Property]]) throws -> [ManagedObject] {
        try catchUp()
        guard !prefetch.isEmpty else { return try objects(for: ids) }
        prefetched = PrefetchCache(generation: generation)
        let rows = try read { session in
            var reader = RowReader(session: session, context: self)
            let rows = try reader.rows(for: ids)
            try loadPrefetch(prefetch, from: ids.compactMap { id in rows[id].map { (id, $0) } }, reader: &reader)
            return rows
        }
        return ids.compactMap { id in
            if let object = registered(id) { return object.state == .deleted ? nil : object }
            return rows[id].map { materialize(id, $0) }
        }
    }
}
