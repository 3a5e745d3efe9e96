import Foundation
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// Lightweight migration: turns a store written by an earlier model version into one for the
/// current model, keeping its data, inside the caller's transaction.
///
/// What it infers, Core Data's lightweight migration's list:
/// - entities added (new tables) and removed (their tables dropped);
/// - attributes and to-one relationships added (new columns, `NULL` or the attribute's
///   default) and removed (columns dropped);
/// - renames, through `@Entity(originalName:)`, `@Attribute(originalName:)` and
///   `@Relationship(originalName:)`;
/// - optional ↔ non-optional (`NULL`s become the default), indexes and unique constraints
///   added or removed, join tables of new to-many relationships, sub-entities added or removed;
/// - inverses added to or removed from a to-many (its pairs move between a join table and the
///   inverse's column: `OldSchema.previousName`, `joinFills`, `columnFills`), and a to-one
///   whose destination changed (it starts empty).
///
/// A column whose SQLite type changes (an attribute's Swift type, say `String` to `Int`) cannot
/// be inferred: the migration throws `StoreError.cannotMigrate` naming the entity and attribute,
/// and the caller's rollback leaves the file as it was. So does a unique constraint that the
/// existing rows violate.
struct Migration {
    let db: Connection
    let schema: StoreSchema
    let old: OldSchema
    /// Reads what a migration would do, and changes nothing: for `lost`, before a migration to
    /// an earlier model is refused (`ModelHistory`) without copying a table.
    let dryRun: Bool

    /// The tables in the file now, with the SQL that created them.
    private var existingTables: [String: String] = [:]
    /// What the migration dropped that held or could hold data: tables, columns, the rows of
    /// entities the model no longer has (`ModelHistory.refusal`).
    private(set) var lost: [String] = []
    /// Old columns whose values a join table took (`OldSchema.joinFills`), by old table: their
    /// columns go, but not their data.
    private var movedToJoins: [String: Set<String>] = [:]
    /// What became of each column of the old model's tables that the migration rebuilt or
    /// dropped, by old table and column: what another program's view, trigger or index that
    /// names one is checked against (`change(of:in:)`).
    private var fates: [String: [String: ColumnFate]] = [:]
    /// Whether another program's view, trigger or index is there to check against `fates`:
    /// without one, the reads only fates need (a table's codes in use, a dropped table's
    /// columns) are not made.
    private var recordsFates = false

    /// What a migration did to a column of the old model's tables.
    private enum ColumnFate {
        /// The same values, under the same name in the same table.
        case kept
        /// Its values are now in other columns or another table (a rename; or, of a column
        /// sub-entities shared, some entities' values in a column of their own).
        case moved(table: String, columns: [String])
        /// The entity codes it holds change, or a code now means another entity (`Z_ENT`).
        case renumbered
        /// Its values are gone from the table.
        case removed
    }

    init(db: Connection, schema: StoreSchema, oldDescription: String, dryRun: Bool = false) throws {
        self.db = db
        self.schema = schema
        self.dryRun = dryRun
        self.old = OldSchema(parsing: oldDescription)
        for row in try db.rows("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'") {
            if let name = row[0].stringValue { existingTables[name] = row[1].stringValue ?? "" }
        }
    }

    /// Runs a statement that changes the file, unless nothing is done (`dryRun`).
    private func execute(_ sql: String) throws(SQLiteError) {
        guard !dryRun else { return }
        try db.execute(sql)
    }

    /// Runs the migration; the caller holds the write transaction.
    mutating func run() throws {
        try refuseNameClashes()
        // Views and triggers another program added go out while tables are rebuilt and come
        // back after, as in SQLite's procedure for schema changes ALTER TABLE cannot make: a
        // view naming a table being rebuilt makes SQLite refuse the rebuild's rename, a trigger
        // on it would go with the old table, and a trigger on another table would fire at the
        // migration's own writes. Each is made again from its SQL after; one that found every
        // table and column it names before is checked again, and one SQLite already found
        // wrong is made again as it was. Another program's indexes on a rebuilt table, which
        // go with the old table, are made again too.
        //
        // What each of them names must also mean after the migration what it meant before:
        // SQLite's authorizer lists the columns a check compiles, and one the migration
        // removes, renames (its old name may now be a new attribute's) or renumbers stops the
        // migration, even where the object would still compile (a view's `SELECT *`).
        let others = dryRun ? [] : try Self.othersObjects([.view, .trigger], in: db)
        let indexes = dryRun ? [] : try Self.othersObjects([.index], in: db)
        recordsFates = !others.isEmpty || !indexes.isEmpty
        let indexColumns = try indexes.map { index throws(SQLiteError) in
            try db.rows("SELECT name FROM pragma_index_info(?) WHERE name IS NOT NULL", [.text(index.name)]).compactMap { $0[0].stringValue }
        }
        for object in others.reversed() { try Self.drop(object, in: db) }
        let before = try verdicts(others)    // made the views again, to check them: out again
        for view in others.reversed() where view.kind == .view { try Self.drop(view, in: db) }
        try migrateTables()
        for (index, columns) in zip(indexes, indexColumns) {
            // Renumbering is one to one: an index on the codes orders and keeps apart the same
            // rows as before.
            try refuseChanged(columns.map { ("covers", index.table, $0) }, of: index, ignoringRenumbered: true)
        }
        try remake(indexes)
        try restore(others, before: before)
    }

    /// Throws `object`'s conflict for the first of `uses` (what it does to a table's column)
    /// that does not mean after the migration what it meant before (`change(of:in:)`).
    private func refuseChanged(_ uses: [(verb: String, table: String, column: String)], of object: SchemaObject,
                               ignoringRenumbered: Bool = false) throws {
        for use in uses {
            if ignoringRenumbered, case .renumbered? = fates[use.table]?[use.column] { continue }
            if let change = change(of: use.column, in: use.table) {
                throw object.conflict("it \(use.verb) \(use.table).\(use.column), \(change)")
            }
        }
    }

    /// Why `column` of the old model's `table` does not mean after the migration what it meant
    /// before, said as the end of a sentence naming it; `nil` when it does (kept), or is no
    /// column of the old model's tables that the migration rebuilt or dropped.
    private func change(of column: String, in table: String) -> String? {
        switch fates[table]?[column] {
        case .removed?: "which the migration removes"
        case .moved(let newTable, let newColumns)?:
            "which the migration moves to \(newColumns.map { "\(newTable).\($0)" }.joined(separator: " and ")) (under its old name it would name other values, or none)"
        case .renumbered?: "whose entity codes the migration renumbers or gives to another entity"
        case .kept?, nil: nil
        }
    }

    /// Migrates every table, index and default, and records the model.
    private mutating func migrateTables() throws {
        var claimed: Set<String> = ["Z_METADATA", "Z_KEYS"]
        // Renamed tables first, each once its name is free; then the others.
        let oldTables = old.tableNames.filter { existingTables[$0] != nil }
        try schema.checkNoTablesMerged(oldTables: oldTables)
        let sources = StoreSchema.RenameSources(tablesOf: schema, oldTables: oldTables)
        let joins = JoinMigration(schema: schema, old: old, tables: sources, oldJoins: old.joinNames.filter { existingTables[$0] != nil }) {
            schema.createJoinTable(named: $0.quotedName)
        }
        for sql in joins.beforeTables { try execute(sql) }
        movedToJoins = joins.movedToJoins
        for table in sources.inRenameOrder(schema.tables, name: \.name) {
            let source = try migrate(table, from: sources.source(of: table.name), tables: sources)
            if let source { claimed.insert(source) }
            claimed.insert(table.name)
        }
        for sql in joins.afterTables { try execute(sql) }
        claimed.formUnion(joins.claimed)
        // A new to-one inverse of a to-many takes its values from the to-many's old join table,
        // which loses only the pairs of a row that was in several owners' to-manys.
        var movedToColumns: Set<String> = []
        for fill in joins.columnFills {
            try execute(fill.sql)
            if try db.scalar(fill.losesPairsSQL) == .integer(0) { movedToColumns.insert(fill.join) }
        }
        // Tables of the old model that nothing claims belonged to removed entities or
        // relationships. Only tables the old model described are dropped: never anyone else's.
        for name in old.tableNames.union(old.joinNames).sorted() where !claimed.contains(name) && existingTables[name] != nil {
            if !movedToColumns.contains(name) { lost.append("the table \(name)") }
            if recordsFates { fates[name] = try columns(of: name).mapValues { _ in .removed } }
            try execute("DROP TABLE \(name.quotedIdentifier)")
            try execute("DELETE FROM Z_KEYS WHERE name = \(name.quotedLiteral)")
        }
        try reconcileIndexes()
        try fillDefaults()
        try execute(schema.metadataStatement())
    }

    // MARK: - Other programs' views, triggers and indexes

    /// A view, trigger or index another program added to the file. ContextStack makes no
    /// views or triggers, and names its own indexes `Z_…`.
    private struct SchemaObject {
        enum Kind: String { case view, trigger, index }
        let kind: Kind
        let name: String
        /// The table (or view) a trigger or index is on; a view's own name.
        let table: String
        let sql: String

        /// `problem` of this object, as `ForeignObjectConflict` says it.
        func conflict(_ problem: String, _ error: SQLiteError? = nil) -> ForeignObjectConflict {
            ForeignObjectConflict(problem: "the \(kind.rawValue) \(name), which ContextStack did not create, does not fit the migrated store (error in \(kind.rawValue) \(name): \(problem))",
                                  remedy: "drop or change it, then open the store again", underlying: error)
        }
    }

    /// Another program's objects of `kinds`, in the order they were made.
    private static func othersObjects(_ kinds: [SchemaObject.Kind], in db: Connection) throws(SQLiteError) -> [SchemaObject] {
        let types = kinds.map { "'\($0.rawValue)'" }.joined(separator: ", ")
        return try db.rows("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE type IN (\(types)) AND sql IS NOT NULL AND NOT (type = 'index' AND substr(name, 1, 2) = 'Z_') ORDER BY rowid").compactMap { row in
            guard let kind = row[0].stringValue.flatMap(SchemaObject.Kind.init), let name = row[1].stringValue,
                  let table = row[2].stringValue, let sql = row[3].stringValue else { return nil }
            return SchemaObject(kind: kind, name: name, table: table, sql: sql)
        }
    }

    /// Refuses a table the model adds (an entity's or a join table) whose name another
    /// program's table, view or index in the file has: making it would fail, and that is not
    /// the model's doing.
    private func refuseNameClashes() throws {
        let added = Set(schema.tables.map(\.name) + schema.joinTables.map(\.name))
        let ours = old.tableNames.union(old.joinNames).union(["Z_METADATA", "Z_KEYS"])
        for row in try db.rows("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view', 'index')") {
            // ContextStack's own indexes (`Z_…`) go with their tables, or are dropped when not wanted.
            guard let type = row[0].stringValue, let name = row[1].stringValue, added.contains(name), !ours.contains(name),
                  !(type == "index" && name.hasPrefix("Z_")) else { continue }
            throw ForeignObjectConflict(problem: "the model adds a table \(name), and another program's \(type) of that name already exists",
                                        remedy: "rename the entity with @Entity(name:), or rename or drop the other \(type), then open the store again", underlying: nil)
        }
    }

    /// Makes again the indexes in `indexes` that went with a rebuilt (or dropped) table.
    private func remake(_ indexes: [SchemaObject]) throws {
        let present = Set(try db.rows("SELECT name FROM sqlite_master WHERE type = 'index'").compactMap { $0[0].stringValue })
        for index in indexes where !present.contains(index.name) { try Self.make(index, in: db) }
    }

    /// Checks each of `objects` (taken out of the file) as `check` does: the views made
    /// together (one may read another), then each trigger made alone over them, checked, and
    /// taken out again. Alone, a trigger's check compiles no other trigger, so one that is
    /// wrong does not make the others beside it look wrong, and the order they were made in
    /// does not matter. The views stay made.
    /// - Returns: each object's verdict, by its index in `objects`.
    /// - Throws: any other failure of the checks (a busy file, an I/O error); a view that
    ///   cannot be made (its name is now a table's), as `ForeignObjectConflict`.
    private func verdicts(_ objects: [SchemaObject]) throws -> [Int: Verdict] {
        var verdicts: [Int: Verdict] = [:]
        for view in objects where view.kind == .view { try Self.make(view, in: db) }
        for (index, object) in objects.enumerated() {
            do {
                if object.kind == .trigger { try Self.make(object, in: db) }
                defer { if object.kind == .trigger { try? Self.drop(object, in: db) } }
                var fires = false
                let uses = try db.columnsUsed { () throws(SQLiteError) in fires = try Self.check(object, in: db) }
                // A trigger's own: not the statement that fires it.
                verdicts[index] = Verdict(outcome: .success(fires), uses: uses.filter { object.kind == .view || $0.within != nil }.sorted())
            } catch let conflict as ForeignObjectConflict {
                verdicts[index] = Verdict(outcome: .failure(conflict.underlying ?? SQLiteError(code: .error, message: conflict.problem)), uses: [])
            } catch let error as SQLiteError where error.code.primary == .error {
                verdicts[index] = Verdict(outcome: .failure(error), uses: [])
            }
        }
        return verdicts
    }

    /// What `verdicts` found of a view or trigger.
    private struct Verdict {
        /// Whether it resolves and, for a trigger, fires; or the error that says why not.
        let outcome: Result<Bool, SQLiteError>
        /// The columns of tables it reads or writes, sorted, so that the conflict a migration
        /// reports for it is the same each time.
        let uses: [Connection.ColumnUse]

        var resolves: Bool { (try? outcome.get()) == true }
    }

    /// Makes the views and triggers taken out for the migration again, and checks those that
    /// resolved `before` it: one that used a column the migration removed, renamed or
    /// renumbered (`change(of:in:)`), or that `verdicts` now finds wrong or no longer firing,
    /// fails the migration, naming it, and the caller's rollback leaves the file, and it, as
    /// they were. Those that were wrong before are made again as they were. Then every trigger
    /// is made, in the order they were made.
    private func restore(_ objects: [SchemaObject], before: [Int: Verdict]) throws {
        let resolved = before.filter(\.value.resolves).sorted { $0.key < $1.key }
        for (index, verdict) in resolved {
            try refuseChanged(verdict.uses.map { ($0.writes ? "writes" : "reads", $0.table, $0.column) }, of: objects[index])
        }
        let after = try verdicts(objects)
        for index in resolved.map(\.key) {
            switch after[index]?.outcome {
            case .success(false)?: throw objects[index].conflict("it no longer fires: the migration removes every column its UPDATE OF names")
            case .failure(let error)?: throw objects[index].conflict(error.message, error)
            default: continue
            }
        }
        for trigger in objects where trigger.kind == .trigger { try Self.make(trigger, in: db) }
    }

    /// Makes `object` from its SQL.
    /// - Throws: `ForeignObjectConflict` when SQLite refuses it; any other failure as it is.
    private static func make(_ object: SchemaObject, in db: Connection) throws {
        do {
            try db.execute(object.sql)
        } catch where error.code.primary == .error {
            throw object.conflict(error.message, error)
        }
    }

    private static func drop(_ object: SchemaObject, in db: Connection) throws(SQLiteError) {
        try db.execute("DROP \(object.kind.rawValue.uppercased()) IF EXISTS \(object.name.quotedIdentifier)")
    }

    /// Prepares what reads a view, or what fires a trigger (an insert, an update of every
    /// column and a delete on its table or view): SQLite compiles views and triggers into the
    /// statements that use them, and fails there on a table or column that is not in the file.
    /// - Returns: for a trigger, whether one of those statements fires it (compiles it as a
    ///   sub-program: the trigger made alone is the only one); a trigger `UPDATE OF` columns
    ///   that are all gone fires at none. For a view, `true`.
    private static func check(_ object: SchemaObject, in db: Connection) throws(SQLiteError) -> Bool {
        let table = object.table.quotedIdentifier
        guard object.kind == .trigger else {
            _ = try Statement(connection: db, sql: "SELECT * FROM \(table)")
            return true
        }
        let columns = try Self.columns(of: object.table, in: db).keys.map(\.quotedIdentifier)
        var statements = ["INSERT INTO \(table) DEFAULT VALUES", "DELETE FROM \(table)"]
        if !columns.isEmpty { statements.append("UPDATE \(table) SET \(columns.map { "\($0) = \($0)" }.joined(separator: ", "))") }
        var fires = false
        for sql in statements {
            do {
                // The program is listed, never run: nothing changes.
                let listing = try Statement(connection: db, sql: "EXPLAIN " + sql)
                while !fires, try listing.step() { fires = listing.text(1) == "Program" }
            } catch where isNotTaken(error) {
                continue
            }
        }
        return fires
    }

    /// Whether `error` says that a view takes no such statement: of a view, only the
    /// statements its `INSTEAD OF` triggers take can be prepared — the view a trigger is on,
    /// or one its body writes to, whose own trigger a check made alone does not have. SQLite
    /// then stops compiling that statement: what it did not reach is not checked.
    private static func isNotTaken(_ error: SQLiteError) -> Bool {
        error.message.hasPrefix("cannot modify ") && error.message.hasSuffix(" because it is a view")
    }

    // MARK: - Tables

    /// Creates, keeps or rebuilds `table` from the old table `sourceName` (`tables`); returns
    /// the name of the old table it came from.
    private mutating func migrate(_ table: Table, from sourceName: String?, tables: StoreSchema.RenameSources) throws -> String? {
        let family = schema.entities.filter { $0.table === table }
        guard let root = family.first(where: { $0.superentity == nil }) else { return nil }
        guard let sourceName else {
            try execute(schema.createTable(table, named: table.quotedName))
            try execute("INSERT OR IGNORE INTO Z_KEYS (name, next) VALUES (\(table.name.quotedLiteral), 1)")
            return nil
        }
        let oldColumns = try columns(of: sourceName)
        // A column another program added to the table is not the model's: a rebuild (which
        // the extra column alone makes this one) would drop it with its values. Refused,
        // unless the new model declares it: then its values are carried as any attribute's.
        if let described = old.columnNames(ofTable: sourceName) {
            let declared = Set(table.columns.map(\.name))
            let added = oldColumns.keys.filter { !described.contains($0) && !declared.contains($0) && !$0.hasPrefix("Z_") }.sorted()
            if !added.isEmpty {
                throw ForeignObjectConflict(problem: "the table \(sourceName) has columns no model of this store described (\(added.joined(separator: ", "))): another program added them, and migrating the table would drop them with their values",
                                            remedy: "declare them as attributes of \(table.name)'s entity (their values are kept), or move their values elsewhere and drop them, then open the store again", underlying: nil)
            }
        }

        // Where each new column's values come from.
        var selections = ["\"Z_PK\""]
        var names = ["\"Z_PK\""]
        var identity = sourceName == table.name
        // The new columns each old one feeds: the old columns carried, and what `fates`
        // records of each.
        var targets: [String: Set<String>] = ["Z_PK": ["Z_PK"]]
        // A column a property renames goes to that property alone: a new attribute given its
        // old name starts empty (`StoreSchema.RenameSources`). So does a to-one whose
        // destination changed: its old keys are another table's.
        var available = Set(oldColumns.keys)
        var sources = StoreSchema.RenameSources(columnsOf: table, in: family, oldColumns: available)
        let repointed = table.columns.filter { column in
            sources.source(of: column.name).map { old.destinationChanged(column, from: $0, in: sourceName, tables: tables) } ?? false
        }
        if !repointed.isEmpty {
            available.subtract(repointed.compactMap { sources.source(of: $0.name) })
            sources = StoreSchema.RenameSources(columnsOf: table, in: family, oldColumns: available)
        }
        // Sub-entities sharing a column may take it from different old columns, entity by entity.
        var splits: [String: [(oldCode: Int64, source: String?)]] = [:]
        if oldColumns["Z_ENT"] != nil {
            let split = try StoreSchema.splitColumns(of: table, family: family, oldColumns: available, old: old, tableWide: sources) { code, column in
                try db.scalar("SELECT EXISTS (SELECT 1 FROM \(sourceName.quotedIdentifier) WHERE \"Z_ENT\" = \(code) AND \(column.quotedIdentifier) IS NOT NULL)") == .integer(1)
            }
            for column in split.splits { splits[column.column] = column.sources }
            lost += split.lost
        }
        for column in table.columns {
            let source = sources.source(of: column.name)
            let split = splits[column.name] ?? []
            for source in [source] + split.map(\.source) {
                guard let source, let oldType = oldColumns[source], oldType.uppercased() != column.type.uppercased() else { continue }
                let owner = family.first { $0.property(named: column.name) != nil }?.name ?? table.name
                throw StoreError(.cannotMigrate, "\(owner).\(column.name) changed type (stored as \(oldType), now \(column.type)): lightweight migration cannot convert it. Keep the old type, add a new attribute and copy the values yourself, or open the store with resetOnFailure: true to start empty.")
            }
            names.append(column.name.quotedIdentifier)
            let wide = source?.quotedIdentifier ?? "NULL"
            if split.isEmpty {
                selections.append(wide)
            } else {
                let cases = split.map { "WHEN \($0.oldCode) THEN \($0.source?.quotedIdentifier ?? "NULL")" }
                selections.append("CASE \"Z_ENT\" \(cases.joined(separator: " ")) ELSE \(wide) END")
                identity = false
            }
            for source in [source] + split.map(\.source) {
                if let source { targets[source, default: []].insert(column.name) }
            }
            if source != column.name { identity = false }
        }
        if Set(oldColumns.keys).subtracting(["Z_PK", "Z_ENT"]).count != table.columns.count { identity = false }

        // The entity column: old codes to new ones; rows of removed entities are dropped.
        var filter = ""
        if table.hasEntityColumn {
            names.append("\"Z_ENT\"")
            if oldColumns["Z_ENT"] != nil {
                var cases: [String] = []
                var kept: [Int64] = []
                var renumbered = false
                for entity in family {
                    guard let code = old.entityCode(of: entity) else { continue }
                    cases.append("WHEN \(code) THEN \(entity.entityCode)")
                    kept.append(code)
                    if code != entity.entityCode {
                        identity = false
                        renumbered = true
                    }
                }
                // A new entity's code that a removed one's rows, or a kept one, had: it now means
                // another entity.
                let added = family.filter { old.entityCode(of: $0) == nil }.map(\.entityCode)
                if recordsFates, !renumbered, !added.isEmpty {
                    let used = Set(kept + (try db.rows("SELECT DISTINCT \"Z_ENT\" FROM \(sourceName.quotedIdentifier)").compactMap { $0[0].int64Value }))
                    renumbered = added.contains(where: used.contains)
                }
                if !renumbered { targets["Z_ENT"] = ["Z_ENT"] }
                selections.append(cases.isEmpty ? "\(root.entityCode)" : "CASE \"Z_ENT\" \(cases.joined(separator: " ")) END")
                filter = " WHERE \"Z_ENT\" IN (\(kept.map(String.init).joined(separator: ", ")))"
            } else {
                // The table gains its first sub-entity: every old row is of the entity it held.
                let owner = family.first { old.name(of: $0) == sourceName } ?? root
                selections.append("\(owner.entityCode)")
                identity = false
            }
        } else if oldColumns["Z_ENT"] != nil {
            // The sub-entities went away: only the root's own rows stay.
            filter = old.entityCode(of: root).map { " WHERE \"Z_ENT\" = \($0)" } ?? ""
            identity = false
        }

        if recordsFates {
            fates[sourceName] = Dictionary(uniqueKeysWithValues: oldColumns.keys.map { column in
                guard let into = targets[column] else { return (column, column == "Z_ENT" && table.hasEntityColumn ? .renumbered : .removed) }
                // Kept: the one column of its name, here, and no sub-entity's values taken out of it.
                let kept = sourceName == table.name && into == [column] && splits[column] == nil
                return (column, kept ? .kept : .moved(table: table.name, columns: into.sorted()))
            })
        }
        let moved = movedToJoins[sourceName] ?? []
        // `Z_ENT` is carried as codes (or dropped with the sub-entities, whose rows are counted below).
        lost += oldColumns.keys.sorted().filter { targets[$0] == nil && $0 != "Z_ENT" && !moved.contains($0) }.map { "the column \(sourceName).\($0)" }
        if !filter.isEmpty, try db.scalar("SELECT EXISTS (SELECT 1 FROM \(sourceName.quotedIdentifier) WHERE NOT (\(filter.dropFirst(" WHERE ".count))))") == .integer(1) {
            lost.append("the rows of \(sourceName) whose entities the model no longer has")
        }

        let wanted = schema.createTable(table, named: table.quotedName)
        if identity && existingTables[sourceName] == wanted {
            // Same table; only rows of removed sub-entities, if any, go.
            if !filter.isEmpty {
                try execute("DELETE FROM \(table.quotedName) WHERE NOT (\(filter.dropFirst(" WHERE ".count)))")
            }
            return sourceName
        }

        let temporary = "Z_MIGRATING_\(table.name)".quotedIdentifier
        try execute(schema.createTable(table, named: temporary))
        try execute("INSERT INTO \(temporary) (\(names.joined(separator: ", "))) SELECT \(selections.joined(separator: ", ")) FROM \(sourceName.quotedIdentifier)\(filter)")
        try execute("DROP TABLE \(sourceName.quotedIdentifier)")
        try execute("ALTER TABLE \(temporary) RENAME TO \(table.quotedName)")
        if sourceName != table.name {
            try execute("DELETE FROM Z_KEYS WHERE name = \(table.name.quotedLiteral)")
            try execute("UPDATE Z_KEYS SET name = \(table.name.quotedLiteral) WHERE name = \(sourceName.quotedLiteral)")
        }
        try execute("INSERT OR IGNORE INTO Z_KEYS (name, next) VALUES (\(table.name.quotedLiteral), 1)")
        return sourceName
    }

    /// The columns of `table` in the file, with their declared types.
    private func columns(of table: String) throws -> [String: String] { try Self.columns(of: table, in: db) }

    private static func columns(of table: String, in db: Connection) throws(SQLiteError) -> [String: String] {
        var result: [String: String] = [:]
        for row in try db.rows("SELECT name, type FROM pragma_table_info(?)", [.text(table)]) {
            if let name = row[0].stringValue { result[name] = row[1].stringValue ?? "" }
        }
        return result
    }

    // MARK: - Indexes and defaults

    /// Drops indexes the model no longer wants (or wants differently) and creates missing ones.
    private func reconcileIndexes() throws {
        let wanted = schema.indexes
        var present: [String: String] = [:]
        for row in try db.rows("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL") {
            if let name = row[0].stringValue { present[name] = row[1].stringValue ?? "" }
        }
        let wantedSQL = Dictionary(wanted.map { ($0.name, $0.sql) }, uniquingKeysWith: { first, _ in first })
        for (name, sql) in present where wantedSQL[name] != sql && name.hasPrefix("Z_") {
            try execute("DROP INDEX \(name.quotedIdentifier)")
            present[name] = nil
        }
        for index in wanted where present[index.name] == nil {
            do {
                try execute(index.sql)
            } catch {
                guard error.code.primary == .constraint else { throw error }
                let constraint = schema.tables.flatMap(\.uniqueConstraints).first { $0.indexName == index.name }
                throw StoreError(.cannotMigrate, "Cannot add the unique constraint on \(constraint?.label ?? index.name): stored rows share a value. Remove the duplicates with the previous model first, or open the store with resetOnFailure: true to start empty.", underlying: error)
            }
        }
    }

    /// Gives non-optional attributes their default where the store holds `NULL` (an attribute
    /// that was optional, or a column added for a new attribute).
    private func fillDefaults() throws {
        guard !dryRun else { return }
        for (sql, value) in schema.defaultFills { try db.execute(sql, [value]) }
    }
}

/// Another program's object stops the migration: a view, trigger or index that no longer fits
/// the migrated store, a table or view in the way of a table the model adds, columns a rebuild
/// would drop. None of it is the model's doing: `SQLiteStore.migrate` makes it `.cannotOpen`,
/// which `resetOnFailure` never answers by erasing the file, the other program's data with it.
struct ForeignObjectConflict: Error {
    /// What stops the migration.
    let problem: String
    /// What the app's developer does about it.
    let remedy: String
    /// SQLite's error, when SQLite refused the object.
    let underlying: SQLiteError?
}
