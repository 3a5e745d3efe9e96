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

    /// The old name of the table of `entity`'s hierarchy.
    package func previousRootName(of entity: ResolvedEntity) -> String {
        let root = entity.rootDescription
        if tableNames.contains(root.name) { return root.name }
        return root.originalName ?? root.name
    }

    /// The name `join` had under the previous model, from its entities' original names, and
    /// whether its `source` and `target` columns have changed places since.
    ///
    /// Follows the naming of `ModelGraph.buildSchema`: `Z_<root>_<property>`, or both sides
    /// sorted and joined for a many-to-many, the side that sorts first owning `source`.
    package func previousName(of join: JoinTable, in schema: StoreSchema) -> (name: String, swapped: Bool)? {
        for entity in schema.entities {
            for property in entity.properties where property.joinTable === join {
                let ownSide = "\(previousRootName(of: entity))_\(property.name)"
                guard let inverse = property.inverse, let destination = property.destination else { return ("Z_" + ownSide, false) }
                let otherSide = "\(previousRootName(of: destination))_\(inverse.name)"
                let wasSource = ownSide <= otherSide
                return ("Z_" + [ownSide, otherSide].sorted().joined(separator: "_"), wasSource != property.isJoinSource)
            }
        }
        return nil
    }
}
