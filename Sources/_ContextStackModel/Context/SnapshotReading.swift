import _ContextStackCore

/// Reads that make values instead of objects: snapshots, counts and aggregate rows, straight
/// from the store and the commits handed to it, for callers with no context of their own
/// (`Context.snapshots`, the async reads of `MainContext`). They see every commit handed to the
/// store before the call — written or still queued for the writer — and never a context's
/// pending changes or a pinned view.
extension ObjectStore {
    /// The rows of snapshots of the objects of `entity` matching `condition`, in order and
    /// windowed as `options` say, with the members of `snapshotEntity`'s to-many relationships
    /// read in one statement per relationship. The caller makes the snapshots from them where
    /// the snapshot type is concrete (specialized), not here, where it would be generic.
    package func snapshotRows(of snapshotEntity: ResolvedEntity, entity: ResolvedEntity, condition: Condition?,
                              orderBy: OrderBy?, options: FetchOptions) throws -> [_SnapshotRow] {
        let request = FetchRequest(condition: condition, orderBy: orderBy, options: options)
        let query = try CompiledQuery(entity: entity, condition: request.condition, orderBy: request.orderBy,
                                      includesSubEntities: request.includesSubEntities, dialect: dialect)
        let toMany = snapshotEntity.properties.filter(\.isToMany)
        return try read { session in
            var reader = RowReader(session: session, context: nil)
            var rows: [_SnapshotRow] = []
            try reader.select(query, offset: request.offset, limit: request.limit, columns: nil,
                              expecting: { rows.reserveCapacity($0) }) { id, row in
                rows.append(_SnapshotRow(id: id, entity: row.entity, values: row.values, members: [:]))
            }
            try Self.addMembers(toMany, to: &rows, reader: &reader)
            return rows
        }
    }

    /// The row of the snapshot of one object, or `nil` when it does not exist or is not of
    /// `entity` (or an entity below it): a Pet's ID asked for as a Person finds nothing, as
    /// `fetch(_:id:)`.
    package func snapshotRow(of snapshotEntity: ResolvedEntity, entity: ResolvedEntity, id: ObjectID) throws -> _SnapshotRow? {
        guard id.rootEntity === entity.rootDescription else { return nil }
        let toMany = snapshotEntity.properties.filter(\.isToMany)
        return try read { session -> _SnapshotRow? in
            var reader = RowReader(session: session, context: nil)
            guard let row = try reader.row(id), entity.includes(row.entity) else { return nil }
            var rows = [_SnapshotRow(id: id, entity: row.entity, values: row.values, members: [:])]
            try Self.addMembers(toMany, to: &rows, reader: &reader)
            return rows[0]
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

    /// Reads the members of `toMany` for every row, in one statement per relationship.
    private static func addMembers(_ toMany: [Property], to rows: inout [_SnapshotRow], reader: inout RowReader) throws {
        guard !toMany.isEmpty, !rows.isEmpty else { return }
        let ids = rows.map(\.id)
        for property in toMany {
            let members = try reader.members(of: ids, property)
            for index in rows.indices {
                rows[index].members[property.slot] = (members[rows[index].id] ?? []).sorted()
            }
        }
    }
}
