import _ContextStackCore
import _ContextStackModel
import _ContextStackPostgres

/// Lightweight migration of a PostgreSQL store: the same changes SQLite's migration infers
/// (entities and attributes added, removed or renamed with `originalName:`, optionality,
/// indexes and unique constraints, join tables, sub-entities added or removed, inverses added
/// to or removed from a to-many, a to-one's destination changed), made in place
/// with `ALTER TABLE` rather than by copying tables, inside the installer's transaction.
///
/// PostgreSQL's DDL is transactional, so a migration that fails part-way — a column whose type
/// changed, a new unique constraint the stored rows violate — leaves the database exactly as it
/// was when the installer rolls back. Keys continue from each table's sequence, which follows a
/// renamed table.
struct PostgresMigration {
    let connection: PostgresConnection
    let schema: StoreSchema
    let old: OldSchema
    /// Reads what a migration would do, and changes nothing: for `lost`, before a migration to
    /// an earlier model is refused (`ModelHistory`) without taking a table's lock.
    let dryRun: Bool

    /// The tables in the store's schema now.
    private var existingTables: Set<String> = []
    /// What the migration dropped that held or could hold data: tables, columns, the rows of
    /// entities the model no longer has (`ModelHistory.refusal`).
    private(set) var lost: [String] = []
    /// Old columns whose values a join table took (`OldSchema.joinFills`), by old table: their
    /// columns go, but not their data.
    private var movedToJoins: [String: Set<String>] = [:]

    init(connection: PostgresConnection, schema: StoreSchema, oldDescription: String, dryRun: Bool = false) throws {
        self.connection = connection
        self.schema = schema
        self.dryRun = dryRun
        self.old = OldSchema(parsing: oldDescription)
        try connection.query("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()") { row in
            if let name = row.value(0).stringValue { existingTables.insert(name) }
        }
    }

    /// Runs the migration; the caller holds the transaction and the advisory lock.
    mutating func run() throws {
        var claimed: Set<String> = ["Z_METADATA"]
        let oldTables = old.tableNames.filter(existingTables.contains)
        try schema.checkNoTablesMerged(oldTables: oldTables)
        let keptIndexes = try dropIndexes()
        // Renamed tables first, each once its name is free; then the others.
        let sources = StoreSchema.RenameSources(tablesOf: schema, oldTables: oldTables)
        let joins = JoinMigration(schema: schema, old: old, tables: sources, oldJoins: old.joinNames.filter(existingTables.contains),
                                  createJoin: StoreSchema.postgresCreateJoinTable)
        for sql in joins.beforeTables { try execute(sql) }
        movedToJoins = joins.movedToJoins
        for table in sources.inRenameOrder(schema.tables, name: \.name) {
            if let source = try migrate(table, from: sources.source(of: table.name), tables: sources) { claimed.insert(source) }
            claimed.insert(table.name)
        }
        for sql in joins.afterTables { try execute(sql) }
        claimed.formUnion(joins.claimed)
        // A new to-one inverse of a to-many takes its values from the to-many's old join table,
        // which loses only the pairs of a row that was in several owners' to-manys.
        var movedToColumns: Set<String> = []
        for fill in joins.columnFills {
            try execute(fill.sql)
            if try connection.scalar(fill.losesPairsSQL) == .integer(0) { movedToColumns.insert(fill.join) }
        }
        // Tables of the old model that nothing claims belonged to removed entities or
        // relationships. Only tables the old model described are dropped: never anyone else's.
        for name in old.tableNames.union(old.joinNames).sorted() where !claimed.contains(name) && existingTables.contains(name) {
            if !movedToColumns.contains(name) { lost.append("the table \(name)") }
            try execute("DROP TABLE \(name.quotedIdentifier)")
            try execute("DROP SEQUENCE IF EXISTS \(StoreSchema.sequenceName(ofTableNamed: name).quotedIdentifier)")
        }
        try dropIndexesOnOtherColumns(keptIndexes)
        try createIndexes()
        try fillDefaults()
        try execute(schema.postgresMetadataStatement)
    }

    private func execute(_ sql: String) throws {
        guard !dryRun else { return }
        try connection.execute(sql)
    }

    // MARK: - Tables

    /// Creates or alters `table`, from the old table `sourceName` (`tables`); returns the name
    /// of the old table it came from.
    private mutating func migrate(_ table: Table, from sourceName: String?, tables: StoreSchema.RenameSources) throws -> String? {
        let family = schema.entities.filter { $0.table === table }
        guard let root = family.first(where: { $0.superentity == nil }) else { return nil }
        guard let sourceName else {
            try execute(schema.postgresCreateTable(table))
            try execute("CREATE SEQUENCE \(StoreSchema.sequenceName(of: table).quotedIdentifier) AS bigint")
            return nil
        }
        var oldColumns = try columns(of: sourceName)
        if sourceName != table.name {
            try execute("ALTER TABLE \(sourceName.quotedIdentifier) RENAME TO \(table.quotedName)")
            try execute("ALTER SEQUENCE \(StoreSchema.sequenceName(ofTableNamed: sourceName).quotedIdentifier) RENAME TO \(StoreSchema.sequenceName(of: table).quotedIdentifier)")
        }

        // Columns: renamed, kept, added; then what is left of the old ones goes. Renames go
        // first, so that a new attribute given the old name (`size` renamed `dimension`, and a
        // new `size`) is a new column, on every store, whatever order they are declared in;
        // and in `renameOrder`, so that in a chain (`label` to `caption`, `serial` to `label`)
        // each name is free when a column is renamed to it.
        var sources = StoreSchema.RenameSources(columnsOf: table, in: family, oldColumns: Set(oldColumns.keys))
        // A to-one whose destination changed starts empty, as a new one: its old keys are
        // another table's. Its old column goes first, so that one of the same name can be added.
        let repointed = table.columns.compactMap { column in
            sources.source(of: column.name).flatMap { old.destinationChanged(column, from: $0, in: sourceName, tables: tables) ? $0 : nil }
        }
        if !repointed.isEmpty {
            for name in repointed.sorted() {
                lost.append("the column \(sourceName).\(name)")
                try execute("ALTER TABLE \(table.quotedName) DROP COLUMN \(name.quotedIdentifier)")
                oldColumns[name] = nil
            }
            sources = StoreSchema.RenameSources(columnsOf: table, in: family, oldColumns: Set(oldColumns.keys))
        }
        // Sub-entities sharing a column may take it from different old columns, entity by
        // entity: their rows are given theirs once the columns are renamed and added.
        var splits: [StoreSchema.SplitColumn] = []
        if oldColumns["Z_ENT"] != nil {
            // Renamed by now, unless nothing is done.
            let current = dryRun ? sourceName.quotedIdentifier : table.quotedName
            let split = try StoreSchema.splitColumns(of: table, family: family, oldColumns: Set(oldColumns.keys), old: old, tableWide: sources) { code, column in
                try connection.scalar("SELECT EXISTS (SELECT 1 FROM \(current) WHERE \"Z_ENT\" = \(code) AND \(column.quotedIdentifier) IS NOT NULL)") == .integer(1)
            }
            splits = split.splits
            lost += split.lost
        }
        for split in splits {
            guard let column = table.columns.first(where: { $0.name == split.column }) else { continue }
            let wanted = StoreSchema.postgresDataType(of: column)
            for case let source? in split.sources.map(\.source) where oldColumns[source].map({ $0 != wanted }) == true {
                let owner = family.first { $0.property(named: column.name) != nil }?.name ?? table.name
                throw StoreError(.cannotMigrate, "\(owner).\(column.name) changed type (stored as \(oldColumns[source]!), now \(wanted)): lightweight migration cannot convert it. Keep the old type, or add a new attribute and copy the values yourself. The database was left as it was.")
            }
        }
        var kept: Set<String> = ["Z_PK", "Z_ENT", "Z_VERSION"]
        for column in sources.inRenameOrder(table.columns, name: \.name) {
            let source = sources.source(of: column.name)
            guard let source else {
                try execute("ALTER TABLE \(table.quotedName) ADD COLUMN \(column.name.quotedIdentifier) \(StoreSchema.postgresType(of: column))")
                kept.insert(column.name)
                continue
            }
            let wanted = StoreSchema.postgresDataType(of: column)
            if let stored = oldColumns[source], stored != wanted {
                let owner = family.first { $0.property(named: column.name) != nil }?.name ?? table.name
                throw StoreError(.cannotMigrate, "\(owner).\(column.name) changed type (stored as \(stored), now \(wanted)): lightweight migration cannot convert it. Keep the old type, or add a new attribute and copy the values yourself. The database was left as it was.")
            }
            if source != column.name {
                try execute("ALTER TABLE \(table.quotedName) RENAME COLUMN \(source.quotedIdentifier) TO \(column.name.quotedIdentifier)")
                oldColumns[column.name] = oldColumns.removeValue(forKey: source)
            }
            kept.insert(column.name)
        }
        // Where each old column is now: renamed, or still under its name until dropped below.
        func now(_ old: String) -> String { sources.renamed.first { $0.value == old }?.key ?? old }
        var assignments: [Int64: [String]] = [:]
        for split in splits {
            for (code, source) in split.sources {
                assignments[code, default: []].append("\(split.column.quotedIdentifier) = \(source.map { now($0).quotedIdentifier } ?? "NULL")")
            }
        }
        for (code, sets) in assignments.sorted(by: { $0.key < $1.key }) {
            try execute("UPDATE \(table.quotedName) SET \(sets.joined(separator: ", ")) WHERE \"Z_ENT\" = \(code)")
        }
        let movedBySplit = Set(splits.flatMap { $0.sources.compactMap(\.source) })
        for name in oldColumns.keys.sorted() where !kept.contains(name) {
            if movedToJoins[sourceName]?.contains(name) != true && !movedBySplit.contains(name) { lost.append("the column \(sourceName).\(name)") }
            try execute("ALTER TABLE \(table.quotedName) DROP COLUMN \(name.quotedIdentifier)")
        }

        // The entity column: old codes to new ones; rows of removed entities go.
        if table.hasEntityColumn {
            if oldColumns["Z_ENT"] != nil {
                var cases: [String] = []
                var remaining: [Int64] = []
                for entity in family {
                    guard let code = old.entityCode(of: entity) else { continue }
                    remaining.append(code)
                    if code != entity.entityCode { cases.append("WHEN \(code) THEN \(entity.entityCode)") }
                }
                try deleteRows(of: table, sourceName: sourceName, where: remaining.isEmpty ? "true" : "\"Z_ENT\" NOT IN (\(remaining.map(String.init).joined(separator: ", ")))")
                if !cases.isEmpty {
                    try execute("UPDATE \(table.quotedName) SET \"Z_ENT\" = CASE \"Z_ENT\" \(cases.joined(separator: " ")) ELSE \"Z_ENT\" END")
                }
            } else {
                // The table gains its first sub-entity: every old row is of the entity it held.
                let owner = family.first { old.name(of: $0) == sourceName } ?? root
                try execute("ALTER TABLE \(table.quotedName) ADD COLUMN \"Z_ENT\" bigint NOT NULL DEFAULT \(owner.entityCode)")
                try execute("ALTER TABLE \(table.quotedName) ALTER COLUMN \"Z_ENT\" DROP DEFAULT")
            }
        } else if oldColumns["Z_ENT"] != nil {
            // The sub-entities went away: only the root's own rows stay.
            if let code = old.entityCode(of: root) {
                try deleteRows(of: table, sourceName: sourceName, where: "\"Z_ENT\" <> \(code)")
            }
            try execute("ALTER TABLE \(table.quotedName) DROP COLUMN \"Z_ENT\"")
        }
        return sourceName
    }

    /// Deletes the rows of entities the model no longer has, counting them as lost when there
    /// are any.
    private mutating func deleteRows(of table: Table, sourceName: String, where condition: String) throws {
        // Renamed by now, unless nothing is done.
        let current = dryRun ? sourceName.quotedIdentifier : table.quotedName
        if try connection.scalar("SELECT EXISTS (SELECT 1 FROM \(current) WHERE \(condition))") == .integer(1) {
            lost.append("the rows of \(sourceName) whose entities the model no longer has")
        }
        try execute("DELETE FROM \(table.quotedName) WHERE \(condition)")
    }

    /// The columns of `table`, with their types as `StoreSchema.postgresType` names them.
    private func columns(of table: String) throws -> [String: String] {
        var result: [String: String] = [:]
        try connection.query("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?",
                             [.text(table)]) { row in
            if let name = row.value(0).stringValue { result[name] = row.value(1).stringValue ?? "" }
        }
        return result
    }

    // MARK: - Indexes and defaults

    /// Drops ContextStack's own indexes of the old model's tables (named `Z_…`, as
    /// `StoreSchema.indexes` names them) unless the model still wants each as it is: an index
    /// carries the SQL that made it as its comment (`StoreSchema.postgresIndexStatements`), and
    /// one whose SQL the model still writes is kept — rebuilding every index of a large
    /// database, under its tables' exclusive locks, for one added attribute would stop the
    /// servers still running for as long. (An index made before the comments were written has
    /// none, and is made again once.) Indexes someone else added, and those behind
    /// constraints, are kept, as on SQLite. Returns the names of the indexes kept.
    private func dropIndexes() throws -> [String] {
        let tables = old.tableNames.union(old.joinNames).filter { existingTables.contains($0) }
        guard !tables.isEmpty else { return [] }
        let wanted = Dictionary(schema.indexes.map { ($0.name, $0.sql) }, uniquingKeysWith: { first, _ in first })
        var (stale, kept): ([String], [String]) = ([], [])
        try connection.query("""
            SELECT i.relname, obj_description(x.indexrelid, 'pg_class') FROM pg_index x
            JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
            JOIN pg_namespace n ON n.oid = t.relnamespace
            WHERE n.nspname = current_schema() AND NOT x.indisprimary AND t.relname = ANY(string_to_array(?, ','))
              AND left(i.relname, 2) = 'Z_' AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)
            """, [.text(tables.sorted().joined(separator: ","))]) { row in
            guard let name = row.value(0).stringValue else { return }
            if let sql = wanted[name], row.value(1).stringValue == sql {
                kept.append(name)
                return
            }
            stale.append(name)
        }
        for name in stale.sorted() { try execute("DROP INDEX \(name.quotedIdentifier)") }
        return kept
    }

    /// Drops those of the indexes `dropIndexes` kept that now index other columns, or another
    /// table, than the model wants: an index follows its column when the column is renamed,
    /// and its table when the table is — renaming an indexed attribute (or an entity) and
    /// giving its old name to a new one left the new one's index on the renamed column (or
    /// table), and the new one without. `createIndexes` makes them again where wanted.
    private func dropIndexesOnOtherColumns(_ kept: [String]) throws {
        guard !kept.isEmpty else { return }
        let wanted = Dictionary(schema.indexes.map { ($0.name, [$0.table] + $0.columns) }, uniquingKeysWith: { first, _ in first })
        var found: [String: [String]] = [:]
        try connection.query("""
            SELECT i.relname, t.relname, a.attname FROM pg_index x
            JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
            JOIN pg_namespace n ON n.oid = i.relnamespace
            CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, position)
            JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
            WHERE n.nspname = current_schema() AND i.relname = ANY(string_to_array(?, ','))
            ORDER BY i.relname, k.position
            """, [.text(kept.sorted().joined(separator: ","))]) { row in
            guard let index = row.value(0).stringValue, let table = row.value(1).stringValue,
                  let column = row.value(2).stringValue else { return }
            found[index, default: [table]].append(column)
        }
        for name in kept.sorted() where found[name] != wanted[name] { try execute("DROP INDEX IF EXISTS \(name.quotedIdentifier)") }
    }

    /// Creates every index the model wants that the schema lacks (one dropped above, one a
    /// dropped column took with it, a new one); a unique one the stored rows violate stops the
    /// migration.
    private func createIndexes() throws {
        var present: Set<String> = []
        try connection.query("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()") { row in
            if let name = row.value(0).stringValue { present.insert(name) }
        }
        for index in schema.indexes where !present.contains(index.name) {
            do {
                for statement in StoreSchema.postgresIndexStatements(index) { try execute(statement) }
            } catch let error as PostgresError where error.code == .uniqueViolation {
                let constraint = schema.tables.flatMap(\.uniqueConstraints).first { $0.indexName == index.name }
                throw StoreError(.cannotMigrate, "Cannot add the unique constraint on \(constraint?.label ?? index.name): stored rows share a value. Remove the duplicates with the previous model first. The database was left as it was.", underlying: error)
            }
        }
    }

    /// Gives non-optional attributes their default where the store holds `NULL` (an attribute
    /// that was optional, or a column added for a new attribute).
    private func fillDefaults() throws {
        guard !dryRun else { return }
        for (sql, value) in schema.defaultFills { try connection.run(sql, [value]) }
    }
}
