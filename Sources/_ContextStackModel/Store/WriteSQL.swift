import _ContextStackCore

/// The SQL a store's writer runs for a change set, the same on every store; what differs (how
/// a join pair that exists already is ignored, a row version) each store adds itself.
///
/// Statements take `?` placeholders, bound in order.
package enum WriteSQL {
    /// `DELETE FROM … WHERE "Z_PK" = ?` for a deleted row, binding its key. Its pairs in join
    /// tables go once all of the commit's statements ran (`QueuedStore.keepReferencesWhole`),
    /// with what other commits related to it meanwhile, so that its delete rules apply to those.
    package static func delete(_ entity: ResolvedEntity) -> String {
        "DELETE FROM \(entity.table.quotedName) WHERE \"Z_PK\" = ?"
    }

    /// Unique indexes are checked row by row, so rows of one commit that trade unique values
    /// must let go of theirs first: an UPDATE setting those columns to NULL for each update
    /// that changes a unique slot, when there are two or more (one alone trades with nobody).
    package static func uniqueReleases(_ updates: [ChangeSet.RowUpdate]) -> [(sql: String, arguments: [Value])] {
        let trading = updates.filter { $0.slots.contains(where: $0.entity.uniqueSlots.contains) }
        guard trading.count > 1 else { return [] }
        return trading.map { update in
            let columns = update.slots.filter(update.entity.uniqueSlots.contains).map { "\(update.entity.properties[$0].name.quotedIdentifier) = NULL" }
            return ("UPDATE \(update.entity.table.quotedName) SET \(columns.joined(separator: ", ")) WHERE \"Z_PK\" = ?", [.integer(update.id.primaryKey)])
        }
    }

    /// `UPDATE … SET a = ?, b = ? WHERE "Z_PK" = ?` for `slots` of `entity`, binding the
    /// slots' values then the key; `alsoSet` adds assignments that bind nothing.
    package static func update(_ entity: ResolvedEntity, slots: [Int], alsoSet: [String] = []) -> String {
        let assignments = slots.map { "\(entity.properties[$0].quotedName) = ?" } + alsoSet
        return "UPDATE \(entity.table.quotedName) SET \(assignments.joined(separator: ", ")) WHERE \"Z_PK\" = ?"
    }

    /// `INSERT INTO … ("Z_PK"[, "Z_ENT"], columns…) VALUES (?, …)` for a row of `entity`,
    /// binding what `insertArguments` gives, in that order.
    package static func insert(_ entity: ResolvedEntity) -> String { insert(entity, rows: 1) }

    /// The same for `rows` rows in one statement: `VALUES (?, …), (?, …), …`, binding each
    /// row's `insertArguments` in turn.
    package static func insert(_ entity: ResolvedEntity, rows: Int) -> String {
        var columns = ["\"Z_PK\""]
        if entity.table.hasEntityColumn { columns.append("\"Z_ENT\"") }
        columns += entity.storedSlots.map { entity.properties[$0].quotedName }
        let row = "(" + Array(repeating: "?", count: columns.count).joined(separator: ", ") + ")"
        return "INSERT INTO \(entity.table.quotedName) (\(columns.joined(separator: ", "))) VALUES " + Array(repeating: row, count: rows).joined(separator: ", ")
    }

    /// The values `insert(entity)` binds for one row: its key, its entity code when the table
    /// is shared, its stored slots.
    package static func insertArguments(_ id: ObjectID, _ row: ObjectRow) -> [Value] {
        var values: [Value] = [.integer(id.primaryKey)]
        if row.entity.table.hasEntityColumn { values.append(.integer(row.entity.entityCode)) }
        for slot in row.entity.storedSlots { values.append(row.values[slot]) }
        return values
    }
}
