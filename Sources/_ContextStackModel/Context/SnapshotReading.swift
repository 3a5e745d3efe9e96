import _ContextStackCore

/// Reads that make values instead of objects: snapshots, counts and aggregate rows, straight
/// from the store and the commits handed to it, for callers with no context of their own
/// (`Context.snapshots`, the async reads of `MainContext`). They see every commit handed to the
/// store before the call — written or still queued for the writer — and never a context's
/// pending changes or a pinned view.
extension ObjectStore {
    /// Hands `body` the row of the snapshot of each object of `entity` matching `condition`, in
    /// order and windowed as `options` say; `expecting` learns how many will follow when the
    /// store knows. The caller makes the snapshots in `body`, where the snapshot type is
    /// concrete (specialized), not here, where it would be generic. The row is valid only
    /// during the call; it is `inout` so that handing it on copies nothing, and `body` does not
    /// change it.
    ///
    /// When nothing pending changes the answer and the snapshot has no to-many relationship,
    /// each row is handed on as the statement steps, its fields read straight from the
    /// statement's columns: no object, no values per row, no second pass. Otherwise the rows
    /// are merged with the pending commits first, and the members of `snapshotEntity`'s
    /// to-many relationships are read in one statement per relationship.
    package func eachSnapshotRow(of snapshotEntity: ResolvedEntity, entity: ResolvedEntity, condition: Condition?,
                                 orderBy: OrderBy?, options: FetchOptions, expecting: (Int) -> Void,
                                 _ body: (inout _SnapshotRow) throws -> Void) throws {
        let request = FetchRequest(condition: condition, orderBy: orderBy, options: options)
        let query = try CompiledQuery(entity: entity, condition: request.condition, orderBy: request.orderBy,
                                      includesSubEntities: request.includesSubEntities, dialect: dialect)
        let toMany = snapshotEntity.properties.filter(\.isToMany)
        try read { session in
            var reader = RowReader(session: session, context: nil)
            if toMany.isEmpty {
                var row = _SnapshotRow(id: ObjectID(rootEntity: entity.rootDescription, primaryKey: 0), entity: entity,
                                       positions: entity.slotPositions)
                // `row.entity`, compared without retaining it for every row.
                var current = Unmanaged.passUnretained(entity)
                let readInPlace = try reader.selectInPlace(query, offset: request.offset, limit: request.limit, expecting: expecting) { id, rowEntity, stored in
                    if rowEntity.toOpaque() != current.toOpaque() {
                        current = rowEntity
                        row.entity = rowEntity.takeUnretainedValue()
                        row.positions = row.entity.slotPositions
                    }
                    row.id = id
                    // The connection moves one row object along the result: set it once.
                    if row.stored !== stored { row.stored = stored }
                    try body(&row)
                }
                if readInPlace { return }
            }
            var rows: [_SnapshotRow] = []
            try reader.select(query, offset: request.offset, limit: request.limit, columns: nil,
                              expecting: { rows.reserveCapacity($0) }) { id, row in
                rows.append(_SnapshotRow(id: id, entity: row.entity, values: row.values, members: [:]))
            }
            try Self.addMembers(toMany, to: &rows, reader: &reader)
            expecting(rows.count)
            for var row in rows { try body(&row) }
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
