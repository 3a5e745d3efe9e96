import _ContextStackCore

/// What the description in an old store's `Z_METADATA` says about the model that wrote it.
///
/// The description (see `ModelGraph.describe`) has one line per table (`table Name [+entity]
/// columns`), per join table (`join Name`) and per entity (`entity Name code properties`).
package struct OldSchema {
    package private(set) var tableNames: Set<String> = []
    package private(set) var joinNames: Set<String> = []
    /// ResolvedEntity name → its code in its table's `Z_ENT` column.
    package private(set) var entityCodes: [String: Int64] = [:]
    /// Entity name → the names of its properties, inherited ones included.
    private var properties: [String: Set<String>] = [:]
    /// Table name → its columns, each with the table its to-one relationship points to (`nil`
    /// for an attribute's).
    private var columns: [String: [String: String?]] = [:]
    /// The tables with an entity column (`Z_ENT`): those of hierarchies with sub-entities.
    private var entityTables: Set<String> = []
    /// Whether the description names to-ones' destinations (`->Table`): any but the first
    /// models' does, that has a to-one.
    private var recordsDestinations = false

    package init(parsing description: String) {
        for line in description.split(separator: "\n") {
            let words = line.split(separator: " ", omittingEmptySubsequences: false)
            guard words.count >= 2 else { continue }
            switch words[0] {
            case "table":
                // `table Name [+entity] name:TYPE[:indexed][->Destination],…`
                let table = String(words[1])
                tableNames.insert(table)
                if words.count > 2 && words[2] == "+entity" { entityTables.insert(table) }
                var found: [String: String?] = [:]
                for column in words.dropFirst(2).last?.split(separator: ",") ?? [] where !column.hasPrefix("+") {
                    guard let name = column.split(separator: ":").first else { continue }
                    let destination = column.range(of: "->").map { String(column[$0.upperBound...]) }
                    if destination != nil { recordsDestinations = true }
                    found[String(name)] = .some(destination)
                }
                columns[table] = found
            case "join": joinNames.insert(String(words[1]))
            case "entity":
                guard words.count >= 3, let code = Int64(words[2]) else { continue }
                entityCodes[String(words[1])] = code
                let names = words.count > 3 ? words[3].split(separator: ",").map { String($0.hasSuffix("?") ? $0.dropLast() : $0) } : []
                properties[String(words[1])] = Set(names)
            default: continue
            }
        }
    }

    /// The columns the old model gave the table `name`, or `nil` when it had no such table.
    package func columnNames(ofTable name: String) -> Set<String>? { columns[name].map { Set($0.keys) } }

    /// The name `entity` had in the old model: its own, or its `originalName`.
    package func name(of entity: ResolvedEntity) -> String? {
        if entityCodes[entity.name] != nil { return entity.name }
        if let original = entity.description_.originalName, entityCodes[original] != nil { return original }
        return nil
    }

    /// The names of the properties the entity that became `entity` had; `nil` for a new one.
    package func propertyNames(of entity: ResolvedEntity) -> Set<String>? { name(of: entity).flatMap { properties[$0] } }

    /// The old `Z_ENT` code of the entity that became `entity`.
    package func entityCode(of entity: ResolvedEntity) -> Int64? { name(of: entity).flatMap { entityCodes[$0] } }

    /// The name `join` had under the previous model, from the old tables of its entities'
    /// hierarchies (`tables`), and whether its `source` and `target` columns have changed
    /// places since; `nil` when its pairs are new.
    ///
    /// Follows the naming of `ModelGraph.buildSchema`: `Z_<root>_<property>` for a to-many
    /// without inverse, its root's side owning `source`; both sides sorted and joined for a
    /// many-to-many, the side that sorts first owning `source`. A to-many that gained a to-many
    /// inverse takes the table it had alone, and one whose inverse went away takes the table it
    /// shared with it: adding or removing an inverse keeps the pairs. Pairs with an entity whose
    /// table is new are new: its rows' keys start again.
    /// `excluding` is a name not to take: the join table's own, when it went to another (a
    /// to-many renamed away, and another given its name), so that a chain is followed through
    /// the `originalName`s.
    package func previousName(of join: JoinTable, in schema: StoreSchema, tables: StoreSchema.RenameSources,
                              excluding: String? = nil) -> (name: String, swapped: Bool)? {
        guard let (entity, property) = schema.side(of: join), let ownRoot = tables.source(of: entity.table.name),
              let destination = property.destination, let otherRoot = tables.source(of: destination.table.name) else { return nil }
        // Each side under its name, then under its `originalName` (a renamed relationship).
        func sides(_ property: Property, root: String) -> [String] {
            ([property.name] + [property.declared.originalName].compactMap { $0 }.filter { $0 != property.name }).map { "\(root)_\($0)" }
        }
        let ownSides = sides(property, root: ownRoot)
        var candidates: [(name: String, wasSource: Bool)] = []
        if let inverse = property.inverse {
            let otherSides = sides(inverse, root: otherRoot)
            // The table of both sides, under any of their names; then, the inverse being new,
            // the table of the side that had one of its own, the side that owns `source` now first.
            for ownSide in ownSides {
                for otherSide in otherSides {
                    candidates.append(("Z_" + [ownSide, otherSide].sorted().joined(separator: "_"), ownSide <= otherSide))
                }
            }
            let own: [(name: String, wasSource: Bool)] = ownSides.map { ("Z_" + $0, true) }
            let other: [(name: String, wasSource: Bool)] = otherSides.map { ("Z_" + $0, false) }
            candidates += property.isJoinSource ? own + other : other + own
        } else {
            candidates = ownSides.flatMap { oneSided($0, otherRoot: otherRoot) }
        }
        guard let found = candidates.first(where: { joinNames.contains($0.name) && $0.name != excluding }) else { return nil }
        return (found.name, found.wasSource != property.isJoinSource)
    }

    /// The names the pairs of the to-many `side` (`Root_property`), without inverse now, may
    /// have had, with whether `side` owned `source`: its own table, then — its inverse, a
    /// to-many of the old table `otherRoot`, went away — the table named for both sides.
    private func oneSided(_ side: String, otherRoot: String) -> [(name: String, wasSource: Bool)] {
        [("Z_" + side, true)] + joinNames.sorted().compactMap { pairedName($0, side: side, otherRoot: otherRoot) }
    }

    /// `name`, and whether `side` owned its `source` column, when `name` is the join table of a
    /// many-to-many between `side` and a to-many of the old table `otherRoot`.
    private func pairedName(_ name: String, side: String, otherRoot: String) -> (name: String, wasSource: Bool)? {
        // A property of the old model's after the root's name: with underscores in names, a
        // name can split more than one way.
        func isOtherSide(_ other: Substring) -> Bool {
            guard other.hasPrefix(otherRoot + "_") else { return false }
            let property = String(other.dropFirst(otherRoot.count + 1))
            return !property.isEmpty && properties.values.contains { $0.contains(property) }
        }
        if name.hasPrefix("Z_\(side)_"), case let other = name.dropFirst("Z_\(side)_".count), isOtherSide(other), side <= other {
            return (name, true)
        }
        if name.hasPrefix("Z_"), name.hasSuffix("_\(side)"), case let other = name.dropFirst(2).dropLast(side.count + 1), isOtherSide(other), other <= side {
            return (name, false)
        }
        return nil
    }

    /// The table the to-one column `column` points to was another under the old model: the
    /// relationship's destination changed (a renamed entity's table is the same one). Its old
    /// keys are of rows of that other table, so the column starts empty, as a new one.
    /// `source` is the old column it would take its values from, in the old table `oldTable`.
    ///
    /// Destinations are compared by table: one moved within a hierarchy (from a sub-entity to
    /// its parent, or a sibling) keeps the keys. A description written before destinations were
    /// recorded (the project's first hour) names none, and nothing counts as changed.
    package func destinationChanged(_ column: Table.Column, from source: String, in oldTable: String, tables: StoreSchema.RenameSources) -> Bool {
        guard recordsDestinations, let destination = column.references, let old = columns[oldTable]?[source] else { return false }
        return old != tables.source(of: destination)
    }

    /// The join tables of `schema` that are new (`joins` gives them no old table) but whose
    /// pairs are in an old join table another one takes (`previousName`): both sides of a
    /// many-to-many kept as to-manys without inverse each keep the pairs. Each is filled with a
    /// copy, turned around when `swapped`, before the other takes the old table.
    package func joinCopies(in schema: StoreSchema, tables: StoreSchema.RenameSources, joins: StoreSchema.RenameSources,
                            oldJoins: Set<String>) -> [(join: JoinTable, from: String, swapped: Bool)] {
        schema.joinTables.compactMap { join in
            // Not a table of its own name, which another took: something new given an old
            // name starts empty.
            guard joins.source(of: join.name) == nil, let previous = previousName(of: join, in: schema, tables: tables, excluding: join.name),
                  oldJoins.contains(previous.name), joins.takes(previous.name) else { return nil }
            return (join, previous.name, previous.swapped)
        }
    }

    /// A join table a migration fills from a to-one column of the old model: the column held
    /// the pairs of a to-many whose to-one inverse went away, or became a to-many.
    package struct JoinFill {
        package let join: JoinTable
        /// The old table and its column, read before the tables migrate.
        package let table: String
        package let column: String
        /// Whether the column's values (the to-many's owners) go to `source`; the rows' keys
        /// go to the other column.
        package let ownerIsSource: Bool
        /// The rows' condition besides a value in the column: in a table shared by several
        /// entities, those of the destination's (siblings may share the column).
        package let rows: String

        /// The statement that fills the join table, the same on every store.
        package var sql: String {
            let (source, target) = ownerIsSource ? (column.quotedIdentifier, "\"Z_PK\"") : ("\"Z_PK\"", column.quotedIdentifier)
            return "INSERT INTO \(join.quotedName) (source, target) SELECT \(source), \(target) FROM \(table.quotedIdentifier) WHERE \(column.quotedIdentifier) IS NOT NULL\(rows)"
        }
    }

    /// The join tables of `schema` that are new (`joins` gives them no old table) but whose
    /// pairs the old model held in a column.
    ///
    /// The old model's to-many of that name (its owner's old table had no column of the name,
    /// so it was not a to-one; no old join table held it) kept its pairs as its inverse's
    /// column in the destination's old table: the one column there pointing to the owner's old
    /// table, or the one of several that the model no longer has. Otherwise, none.
    package func joinFills(in schema: StoreSchema, tables: StoreSchema.RenameSources, joins: StoreSchema.RenameSources) -> [JoinFill] {
        var fills: [JoinFill] = []
        // Either side of a new join table may be the to-many that had its pairs in a column.
        for entity in schema.entities {
            for property in entity.properties {
                guard let join = property.joinTable, joins.source(of: join.name) == nil, !fills.contains(where: { $0.join === join }),
                      let oldName = name(of: entity), properties[oldName]?.contains(property.name) == true,
                      let ownRoot = tables.source(of: entity.table.name), columns[ownRoot]?[property.name] == nil,
                      let destination = property.destination, let otherRoot = tables.source(of: destination.table.name),
                      let column = inverseColumn(in: otherRoot, pointingTo: ownRoot, now: destination.table) else { continue }
                var rows = ""
                if entityTables.contains(otherRoot) {
                    let codes = destination.family.compactMap(entityCode(of:)).map(String.init)
                    rows = " AND \"Z_ENT\" IN (\(codes.isEmpty ? "NULL" : codes.joined(separator: ", ")))"
                }
                fills.append(JoinFill(join: join, table: otherRoot, column: column, ownerIsSource: property.isJoinSource, rows: rows))
            }
        }
        return fills
    }

    /// The column of the old table `table` that held the pairs of a to-many of the old table
    /// `owner`: the one pointing to `owner`, or the one of several that `now` (the table's
    /// table under the model) no longer has.
    private func inverseColumn(in table: String, pointingTo owner: String, now: Table) -> String? {
        let pointing = (columns[table] ?? [:]).filter { $0.value == owner }.map(\.key)
        if pointing.count == 1 { return pointing[0] }
        let gone = pointing.filter { name in !now.columns.contains { $0.name == name } }
        return gone.count == 1 ? gone[0] : nil
    }

    /// A to-one column a migration fills from a join table of the old model: the to-one is the
    /// new inverse of a to-many that kept its pairs in that table. A row that was in several
    /// owners' to-manys takes the owner with the smallest key.
    package struct ColumnFill {
        package let table: Table
        package let column: String
        /// The old join table, and its columns holding the owners and the members (the rows).
        package let join: String
        package let owner: String
        package let member: String

        /// Whether a row was in several owners' to-manys (all but one of its pairs are lost),
        /// the same on every store.
        package var losesPairsSQL: String {
            "SELECT EXISTS (SELECT 1 FROM \(join.quotedIdentifier) GROUP BY \(member) HAVING count(*) > 1)"
        }

        /// The statement, the same on every store.
        package var sql: String {
            "UPDATE \(table.quotedName) SET \(column.quotedIdentifier) = (SELECT min(\(owner)) FROM \(join.quotedIdentifier) WHERE \(member) = \(table.quotedName).\"Z_PK\") WHERE \(column.quotedIdentifier) IS NULL"
        }
    }

    /// The new to-one columns of `schema` that are the inverse of a to-many whose pairs the old
    /// model kept in a join table that no join table of the model takes over (`joins`).
    package func columnFills(in schema: StoreSchema, tables: StoreSchema.RenameSources, joins: StoreSchema.RenameSources) -> [ColumnFill] {
        var fills: [ColumnFill] = []
        for entity in schema.entities {
            for property in entity.properties where property.isToOne {
                guard let inverse = property.inverse, inverse.isToMany, let owner = property.destination,
                      !fills.contains(where: { $0.table === entity.table && $0.column == property.name }),
                      let table = tables.source(of: entity.table.name), let oldColumns = columns[table],
                      oldColumns[property.name] == nil, property.declared.originalName.map({ oldColumns[$0] == nil }) ?? true,
                      let oldOwner = name(of: owner), properties[oldOwner]?.contains(inverse.name) == true,
                      let ownRoot = tables.source(of: owner.table.name) else { continue }
                let candidates = oneSided("\(ownRoot)_\(inverse.name)", otherRoot: table)
                guard let found = candidates.first(where: { joinNames.contains($0.name) && !joins.takes($0.name) }) else { continue }
                fills.append(ColumnFill(table: entity.table, column: property.name, join: found.name,
                                        owner: found.wasSource ? "source" : "target", member: found.wasSource ? "target" : "source"))
            }
        }
        return fills
    }
}

/// The models a store was written by, oldest first: their hashes, kept in `Z_METADATA` under
/// `models` beside the current one's `hash`, and added to at every creation and migration.
///
/// What it is for: an older version of the app that opens a store a newer version migrated
/// (an old server starting during a rolling deploy, a rollback) has a model the store was at
/// before. Migrating "back" to it would drop the tables and columns the newer model added,
/// with what the newer version wrote in them, so such a migration is refused when it would
/// drop anything (`refusal`), before it changes anything: a dry run of the migration says what
/// it would drop. A model never seen before migrates as always, dropping what it
/// removed: that is a new version's choice.
package struct ModelHistory: Equatable, Sendable {
    /// The hashes, oldest first; the last is the store's current model's.
    package private(set) var hashes: [String]

    /// At most this many are kept: the oldest go first.
    static let limit = 64

    /// `recorded` is the `models` entry, `nil` in a store from before it was kept, whose
    /// history is its current model alone.
    package init(recorded: String?, current: String) {
        var hashes = recorded.map { $0.split(separator: " ").map(String.init) } ?? []
        if hashes.last != current { hashes.append(current) }
        self.hashes = hashes
    }

    /// Whether `hash` is older than the store's model: the store first had it before it first
    /// had its current one. After a rollback (A, B, A), B is not older than A, so the rollout
    /// goes on (A, B, A, B); A stays older than B from then on.
    package func isOlder(_ hash: String) -> Bool {
        guard let current = hashes.last, hash != current, let older = hashes.firstIndex(of: hash),
              let first = hashes.firstIndex(of: current) else { return false }
        return older < first
    }

    /// The history once the store is at `hash`.
    package func moved(to hash: String) -> ModelHistory {
        var next = self
        if next.hashes.last != hash { next.hashes.append(hash) }
        next.hashes.removeFirst(max(0, next.hashes.count - Self.limit))
        return next
    }

    /// The `models` entry.
    package var text: String { hashes.joined(separator: " ") }

    /// Migrates the store to the model `hash` with `migrate`, which returns what it dropped
    /// (tables, columns, an entity's rows) and, given `dryRun: true`, changes nothing. Going
    /// back to an older model (`isOlder`) is refused when it would drop anything: from a dry
    /// run first, before anything is locked or changed, and from the real run again — for what
    /// the dry run could not foresee; the caller's transaction rolls that back.
    /// - Throws: `refusal`'s error, or `migrate`'s.
    package func migrate(to hash: String, store: String, _ migrate: (_ dryRun: Bool) throws -> [String]) throws {
        if isOlder(hash), let refusal = refusal(returningTo: hash, lost: try migrate(true), store: store) { throw refusal }
        if let refusal = refusal(returningTo: hash, lost: try migrate(false), store: store) { throw refusal }
    }

    /// The error for opening `store` with a model older than its own (`isOlder`), whose
    /// migration would drop `lost` (tables, columns, an entity's rows); `nil` when it drops
    /// nothing, or the model is not an older one.
    private func refusal(returningTo hash: String, lost: [String], store: String) -> StoreError? {
        guard isOlder(hash), !lost.isEmpty else { return nil }
        return StoreError(.newerModel, "\(store) was migrated to a newer model by a newer version of the app; this model is one it had before, and migrating back to it would drop \(lost.joined(separator: ", ")), with what the newer version wrote there. Nothing was changed. Run the newer version of the app. To return to this model on purpose, drop those yourself first: a migration that drops nothing is allowed.")
    }
}
