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

    package init(parsing description: String) {
        for line in description.split(separator: "\n") {
            let words = line.split(separator: " ", omittingEmptySubsequences: false)
            guard words.count >= 2 else { continue }
            switch words[0] {
            case "table": tableNames.insert(String(words[1]))
            case "join": joinNames.insert(String(words[1]))
            case "entity":
                if words.count >= 3, let code = Int64(words[2]) { entityCodes[String(words[1])] = code }
            default: continue
            }
        }
    }

    /// The name `entity` had in the old model: its own, or its `originalName`.
    package func name(of entity: ResolvedEntity) -> String? {
        if entityCodes[entity.name] != nil { return entity.name }
        if let original = entity.description_.originalName, entityCodes[original] != nil { return original }
        return nil
    }

    /// The old `Z_ENT` code of the entity that became `entity`.
    package func entityCode(of entity: ResolvedEntity) -> Int64? { name(of: entity).flatMap { entityCodes[$0] } }

    /// The name `join` had under the previous model, from the old tables of its entities'
    /// hierarchies (`tables`), and whether its `source` and `target` columns have changed
    /// places since; `nil` when one of them is new.
    ///
    /// Follows the naming of `ModelGraph.buildSchema`: `Z_<root>_<property>`, or both sides
    /// sorted and joined for a many-to-many, the side that sorts first owning `source`.
    package func previousName(of join: JoinTable, in schema: StoreSchema, tables: StoreSchema.RenameSources) -> (name: String, swapped: Bool)? {
        for entity in schema.entities {
            for property in entity.properties where property.joinTable === join {
                guard let ownRoot = tables.source(of: entity.table.name) else { return nil }
                let ownSide = "\(ownRoot)_\(property.name)"
                guard let inverse = property.inverse, let destination = property.destination else { return ("Z_" + ownSide, false) }
                guard let otherRoot = tables.source(of: destination.table.name) else { return nil }
                let otherSide = "\(otherRoot)_\(inverse.name)"
                let wasSource = ownSide <= otherSide
                return ("Z_" + [ownSide, otherSide].sorted().joined(separator: "_"), wasSource != property.isJoinSource)
            }
        }
        return nil
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
