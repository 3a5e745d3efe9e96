import _ContextStackCore

/// What a migration does with the join tables, the same on every store (SQLite's `Migration`,
/// `PostgresMigration`); only the statement that creates a join table is each store's own.
///
/// The order a store keeps: `beforeTables`, then the entity tables' migration, `afterTables`,
/// and the `columnFills`; then the old tables nothing `claimed` are dropped.
package struct JoinMigration {
    /// Run before the entity tables migrate: join tables filled from the to-one columns those
    /// migrations drop (`OldSchema.joinFills`), and copies of old join tables that another
    /// join table takes (`OldSchema.joinCopies`).
    package private(set) var beforeTables: [String] = []
    /// Run after: the other join tables created, renamed, or turned around.
    package private(set) var afterTables: [String] = []
    /// The new to-one columns that take their values from old join tables, once the entity
    /// tables have them.
    package let columnFills: [OldSchema.ColumnFill]
    /// The join tables of the model, and the old ones they take over.
    package private(set) var claimed: Set<String> = []
    /// Old columns whose values a join table took, by old table: their columns go, but not
    /// their data.
    package private(set) var movedToJoins: [String: Set<String>] = [:]

    /// The join tables of `schema` from those of the old model the database has (`oldJoins`),
    /// after the entity tables' renames (`tables`); `createJoin` is the store's `CREATE TABLE`.
    package init(schema: StoreSchema, old: OldSchema, tables: StoreSchema.RenameSources, oldJoins: Set<String>,
                 createJoin: (JoinTable) -> String) {
        let joins = StoreSchema.RenameSources(joinsOf: schema, oldJoins: oldJoins, tables: tables, old: old)
        func copy(_ join: JoinTable, from previous: String, swapped: Bool) -> [String] {
            [createJoin(join),
             "INSERT INTO \(join.quotedName) (source, target) SELECT \(swapped ? "target, source" : "source, target") FROM \(previous.quotedIdentifier)"]
        }
        var made: Set<ObjectIdentifier> = []
        for fill in old.joinFills(in: schema, tables: tables, joins: joins) {
            beforeTables += [createJoin(fill.join), fill.sql]
            movedToJoins[fill.table, default: []].insert(fill.column)
            made.insert(ObjectIdentifier(fill.join))
        }
        for copied in old.joinCopies(in: schema, tables: tables, joins: joins, oldJoins: oldJoins) {
            beforeTables += copy(copied.join, from: copied.from, swapped: copied.swapped)
            made.insert(ObjectIdentifier(copied.join))
        }
        // Renamed ones first, each once its name is free; then the others.
        for join in joins.inRenameOrder(schema.joinTables, name: \.name) {
            claimed.insert(join.name)
            guard let previous = joins.source(of: join.name) else {
                if !made.contains(ObjectIdentifier(join)) { afterTables.append(createJoin(join)) }
                continue
            }
            claimed.insert(previous)
            guard previous != join.name else { continue }
            if old.previousName(of: join, in: schema, tables: tables, excluding: join.name)?.swapped == true {
                // The renamed side now sorts on the other side of the name: it owns the other
                // column, so the pairs turn around — copied, so that the primary key leads with
                // `source` (a to-many's faults look pairs up by it).
                afterTables += copy(join, from: previous, swapped: true) + ["DROP TABLE \(previous.quotedIdentifier)"]
            } else {
                afterTables.append("ALTER TABLE \(previous.quotedIdentifier) RENAME TO \(join.quotedName)")
            }
        }
        columnFills = old.columnFills(in: schema, tables: tables, joins: joins)
    }
}
