import _ContextStackCore

/// Reads that make values instead of objects: snapshots, counts and aggregate rows, straight
/// from the store and the commits handed to it, for callers with no context of their own
/// (`Context.snapshots`, the async reads of `MainContext`). They see every commit handed to the
/// store before the call — written or still queued for the writer — and never a context's
/// pending changes or a pinned view.
extension ObjectStore {
    /// Snapshots of the objects of `entity` matching `condition`, in order and windowed as
    /// `options` say, with their to-many members read in one statement per relationship.
    package func snapshots<S: EntitySnapshot>(_ type: S.Type, entity: ResolvedEntity, condition: Condition?, orderBy: OrderBy?,
                                              options: FetchOptions) throws -> [S] {
        let request = FetchRequest(condition: condition, orderBy: orderBy, options: options)
        let query = try CompiledQuery(entity: entity, condition: request.condition, orderBy: request.orderBy,
                                      includesSubEntities: request.includesSubEntities, dialect: dialect)
        let toMany = snapshotMembers(of: S.self)
        return try read { session in
            var reader = RowReader(session: session, context: nil)
            if toMany.isEmpty {
                // Each row becomes its snapshot as it is read, while it is still in the cache.
                var snapshots: [S] = []
                try reader.select(query, offset: request.offset, limit: request.limit, columns: nil,
                                  expecting: { snapshots.reserveCapacity($0) }) { id, row in
                    snapshots.append(S(_cs_row: _SnapshotRow(id: id, entity: row.entity, values: row.values, members: [:])))
                }
                return snapshots
            }
            var rows: [(id: ObjectID, row: ObjectRow)] = []
            try reader.select(query, offset: request.offset, limit: request.limit, columns: nil,
                              expecting: { rows.reserveCapacity($0) }) { id, row in rows.append((id, row)) }
            return try Self.snapshots(of: rows, toMany: toMany, reader: &reader)
        }
    }

    /// The snapshot of one object, or `nil` when it does not exist or is not of `entity` (or
    /// an entity below it): a Pet's ID asked for as a Person finds nothing, as `fetch(_:id:)`.
    package func snapshot<S: EntitySnapshot>(_ type: S.Type, entity: ResolvedEntity, id: ObjectID) throws -> S? {
        guard id.rootEntity === entity.rootDescription else { return nil }
        let toMany = snapshotMembers(of: S.self)
        return try read { session -> S? in
            var reader = RowReader(session: session, context: nil)
            guard let row = try reader.row(id), entity.includes(row.entity) else { return nil }
            let found: [S] = try Self.snapshots(of: [(id, row)], toMany: toMany, reader: &reader)
            return found.first
        }
    }

    /// How many objects of `entity` match `condition`: one `count(*)` when nothing is queued
    /// for the writer and SQL decides the condition alone.
    package func count(entity: ResolvedEntity, condition: Condition?) throws -> Int {
        let query = try CompiledQuery(entity: entity, condition: condition, orderBy: nil, dialect: dialect)
        return try read { session in
            var reader = RowReader(session: session, context: nil)
            if session.overlay.isEmpty && !query.filtersInMemory {
                let sql = query.fromWhere()
                return Int(try session.connection.scalar("SELECT count(*) \(sql.text)", sql.arguments).int64Value ?? 0)
            }
            var count = 0
            try reader.select(query, offset: 0, limit: nil, columns: [], expecting: { _ in }) { _, _ in count += 1 }
            return count
        }
    }

    /// The to-many relationships a snapshot of `S` holds (those of `S.Entity`).
    private func snapshotMembers<S: EntitySnapshot>(of type: S.Type) -> [Property] {
        graph.entity(for: S.Entity.self).properties.filter(\.isToMany)
    }

    private static func snapshots<S: EntitySnapshot>(of rows: [(id: ObjectID, row: ObjectRow)], toMany: [Property],
                                                     reader: inout RowReader) throws -> [S] {
        var members: [Int: [ObjectID: [ObjectID]]] = [:]
        if !rows.isEmpty {
            for property in toMany {
                members[property.slot] = try reader.members(of: rows.map(\.id), property)
            }
        }
        return rows.map { id, row in
            var owned: [Int: [ObjectID]] = [:]
            for property in toMany { owned[property.slot] = (members[property.slot]?[id] ?? []).sorted() }
            return S(_cs_row: _SnapshotRow(id: id, entity: row.entity, values: row.values, members: owned))
        }
    }
}
