import Foundation
import _ContextStackCore

/// The entities an application stores, validated together.
///
/// For example:
///
/// ```swift
/// let model = try Model(Person.self, Pet.self)
/// ```
///
/// `Model` checks that every relationship's destination is in the model, that every declared
/// inverse exists and points back, and that entity names are unique; it throws `ModelError`
/// naming the problem otherwise.
public struct Model: Sendable {
    package let graph: ModelGraph

    /// A model of `types`, each an `@Entity` class.
    ///
    /// - Parameters:
    ///   - types: the entity classes.
    ///   - configurations: named subsets of the entities, for stores that hold only some of them.
    /// - Throws: `ModelError` when the model is inconsistent.
    public init(_ types: ManagedObject.Type..., configurations: [String: [ManagedObject.Type]] = [:]) throws {
        try self.init(types, configurations: configurations)
    }

    /// A model of `types`, each an `@Entity` class.
    public init(_ types: [ManagedObject.Type], configurations: [String: [ManagedObject.Type]] = [:]) throws {
        graph = try ModelGraph.resolved(types.map { $0.entityDescription }, configurations: configurations.mapValues { $0.map { $0.entityDescription } })
    }

    /// The names of the model's entities.
    public var entityNames: [String] { graph.entities.map(\.name) }

    /// A hash of the model's schema: equal for models that store the same tables and columns.
    public var versionHash: String { graph.versionHash }
}

/// The resolved model shared by a stack and everything in it.
package final class ModelGraph: Sendable {
    package let entities: [ResolvedEntity]
    package let tables: [Table]
    package let joinTables: [JoinTable]
    package let configurations: [String: Set<String>]
    package let versionHash: String
    package let schemaDescription: String
    private let byDescription: [ObjectIdentifier: ResolvedEntity]
    private let byName: [String: ResolvedEntity]

    /// The graph of `descriptions` and `configurations`: the one resolved before for the same
    /// entities and configurations, or a new one, kept for the rest of the process.
    ///
    /// A resolved model's entities reference one another (an entity's family holds it, a
    /// property its destination and inverse, a constraint its entity), so a graph is never
    /// freed, and a server that made a `Model` for every stack (one per tenant, say) kept every
    /// one of them: their entities, schema and cached SQL texts. Resolved once for each set of
    /// entity types, as a type's metadata is, what the process keeps is bounded by the models
    /// its code names. A graph changes nothing after it is made (its entities' caches of SQL
    /// text are locked and keyed by dialect), so stacks of equal models share one, as stacks
    /// given one `Model` always have. The key's identifiers stay unique: the graph it names
    /// holds the descriptions they identify.
    static func resolved(_ descriptions: [EntityDescription], configurations: [String: [EntityDescription]]) throws(ModelError) -> ModelGraph {
        let key = Key(entities: Set(descriptions.map(ObjectIdentifier.init)),
                      configurations: configurations.mapValues { Set($0.map(ObjectIdentifier.init)) })
        if let graph = resolvedGraphs.withLock({ $0[key] }) {
            // Made again, it is the latest model for `ObjectID(_:)`'s names, as a new one is.
            ObjectID.register(graph.entities)
            return graph
        }
        // Resolved outside the lock; of two threads resolving one model at once, the first
        // to store its graph has it used by both.
        let graph = try ModelGraph(descriptions, configurations: configurations)
        return resolvedGraphs.withLock { graphs in
            if let earlier = graphs[key] { return earlier }
            graphs[key] = graph
            return graph
        }
    }

    private struct Key: Hashable {
        let entities: Set<ObjectIdentifier>
        let configurations: [String: Set<ObjectIdentifier>]
    }

    private static let resolvedGraphs = Locked<[Key: ModelGraph]>([:])

    init(_ descriptions: [EntityDescription], configurations: [String: [EntityDescription]]) throws(ModelError) {
        guard !descriptions.isEmpty else {
            throw ModelError(code: .emptyModel, message: "A model needs at least one entity: Model(Person.self, ...).")
        }
        // Parent entities come along even when not listed: fetching a sub-entity needs its table.
        var all: [EntityDescription] = []
        var seen = Set<ObjectIdentifier>()
        func add(_ description: EntityDescription) {
            if let parent = description.superentity { add(parent) }
            if seen.insert(ObjectIdentifier(description)).inserted { all.append(description) }
        }
        // Sorted by name: the same entities give the same schema, hash and entity codes
        // whatever order they are listed in.
        descriptions.sorted { $0.name < $1.name }.forEach(add)

        var byName: [String: ResolvedEntity] = [:]
        var byDescription: [ObjectIdentifier: ResolvedEntity] = [:]
        var entities: [ResolvedEntity] = []
        for description in all {
            if byName[description.name] != nil {
                throw ModelError(code: .duplicateEntity, message: "Two entities are named '\(description.name)'; give one another name with @Entity(name:).")
            }
            for property in description.ownProperties where property.name.hasPrefix("Z_") {
                throw ModelError(code: .reservedName, message: "\(description.name).\(property.name): names starting with 'Z_' are reserved for the store's own columns; rename the property.")
            }
            let entity = ResolvedEntity(description)
            byName[description.name] = entity
            byDescription[ObjectIdentifier(description)] = entity
            entities.append(entity)
        }
        self.entities = entities
        self.byName = byName
        self.byDescription = byDescription

        var namedConfigurations: [String: Set<String>] = [:]
        for (name, members) in configurations {
            for member in members where byName[member.name] == nil {
                throw ModelError(code: .unknownConfiguration, message: "Configuration '\(name)' lists \(member.name), which is not in the model.")
            }
            // A hierarchy shares one table, so a configuration holds whole hierarchies.
            let roots = Set(members.map { ObjectIdentifier($0.root) })
            namedConfigurations[name] = Set(entities.filter { roots.contains(ObjectIdentifier($0.rootDescription)) }.map(\.name))
        }
        self.configurations = namedConfigurations

        try Self.resolveRelationships(entities, byDescription: byDescription)
        try Self.checkConfigurations(namedConfigurations, entities: entities)
        (tables, joinTables) = Self.buildSchema(entities, byDescription: byDescription)
        try UniqueConstraint.resolve(entities)
        for entity in entities {
            entity.uniqueSlots = Set(entity.uniqueConstraints.flatMap(\.slots))
            entity.table.uniqueConstraints += entity.uniqueConstraints.filter { $0.entity === entity }
        }
        schemaDescription = Self.describe(tables: tables, joinTables: joinTables, entities: entities)
        versionHash = Self.fnv1a(schemaDescription)
        ObjectID.register(entities)
    }

    package func entity(for description: EntityDescription) -> ResolvedEntity? { byDescription[ObjectIdentifier(description)] }
    package func entity(named name: String) -> ResolvedEntity? { byName[name] }

    /// The entity named `name`, or else the one renamed from it (`@Entity(originalName:)`):
    /// history written before a migration names entities as they were then.
    package func entity(namedOrRenamedFrom name: String) -> ResolvedEntity? {
        byName[name] ?? entities.first { $0.description_.originalName == name }
    }

    /// The entity for an object class, or a precondition failure naming the fix.
    package func entity(for type: ManagedObject.Type) -> ResolvedEntity {
        guard let entity = entity(for: type.entityDescription) else {
            preconditionFailure("\(type) is not in this stack's model: add it to Model(...) when you create the Stack.")
        }
        return entity
    }

    // MARK: - Resolution

    private static func resolveRelationships(_ entities: [ResolvedEntity], byDescription: [ObjectIdentifier: ResolvedEntity]) throws(ModelError) {
        for entity in entities {
            for property in entity.properties {
                guard case .relationship(let destinationDescription, _, let inverseName, _) = property.declared.kind else { continue }
                let described = destinationDescription()
                guard let destination = byDescription[ObjectIdentifier(described)] else {
                    throw ModelError(code: .unknownDestination, message: "\(entity.name).\(property.name) points to \(described.name), which is not in the model: add \(described.name).self to Model(...).")
                }
                property.destination = destination
                if let inverseName {
                    guard let inverse = destination.property(named: inverseName), inverse.isRelationship else {
                        throw ModelError(code: .badInverse, message: "\(entity.name).\(property.name) names the inverse \\\(destination.name).\(inverseName), but \(destination.name) has no relationship '\(inverseName)'.")
                    }
                    guard case .relationship(let back, _, let backInverse, _) = inverse.declared.kind,
                          let backEntity = byDescription[ObjectIdentifier(back())], backEntity.includes(entity) || entity.includes(backEntity)
                    else {
                        throw ModelError(code: .badInverse, message: "\(entity.name).\(property.name) names the inverse \(destination.name).\(inverseName), but that relationship does not point back to \(entity.name).")
                    }
                    if inverseName == property.name && (destination.includes(entity) || entity.includes(destination)) {
                        // Symmetric (Core Data's `friends` that is its own inverse): one side
                        // would have to be both ends of every pair, which the join table and the
                        // inverse bookkeeping do not do. `@Relationship` cannot declare it (Swift
                        // reports a circular reference); a description written by hand could.
                        throw ModelError(code: .badInverse, message: "\(entity.name).\(property.name) names itself as its inverse, which ContextStack does not support. Declare two relationships, each the other's inverse (friends and friendOf), and set the one you mean.")
                    }
                    if let backInverse, backInverse != property.name {
                        throw ModelError(code: .badInverse, message: "\(entity.name).\(property.name) names the inverse \(destination.name).\(inverseName), but \(destination.name).\(inverseName) names \(backInverse) as its inverse.")
                    }
                    property.inverse = inverse
                } else {
                    // An inverse declared on the other side only.
                    property.inverse = destination.properties.first { candidate in
                        guard case .relationship(let back, _, let backInverse?, _) = candidate.declared.kind else { return false }
                        guard let backEntity = byDescription[ObjectIdentifier(back())] else { return false }
                        return backInverse == property.name && backEntity.includes(entity)
                    }
                }
            }
        }
    }

    /// A store holds one configuration: a relationship must stay inside every configuration
    /// that holds its entity, or the store could not write it.
    private static func checkConfigurations(_ configurations: [String: Set<String>], entities: [ResolvedEntity]) throws(ModelError) {
        for (name, members) in configurations.sorted(by: { $0.key < $1.key }) {
            for entity in entities where members.contains(entity.name) {
                for property in entity.properties where property.isRelationship {
                    guard let destination = property.destination, !members.contains(destination.name) else { continue }
                    throw ModelError(code: .relationshipAcrossConfigurations, message: "\(entity.name).\(property.name) points to \(destination.name), which configuration '\(name)' does not hold: a relationship cannot cross stores. Add \(destination.name).self to '\(name)', or remove the relationship.")
                }
            }
        }
    }

    private static func buildSchema(_ entities: [ResolvedEntity], byDescription: [ObjectIdentifier: ResolvedEntity]) -> ([Table], [JoinTable]) {
        var tables: [Table] = []
        var joinTables: [String: JoinTable] = [:]
        let roots = entities.filter { $0.description_.superentity == nil }
        for root in roots {
            let family = entities.filter { root.includes($0) || $0.description_.root === root.description_ }
            var columns: [Table.Column] = []
            var columnIndex: [String: Int] = [:]
            for member in family {
                for property in member.properties where property.isStored && columnIndex[property.name] == nil {
                    columnIndex[property.name] = columns.count
                    let options = property.options
                    columns.append(Table.Column(
                        name: property.name,
                        type: property.attributeKind?.columnType ?? "INTEGER",
                        isIndexed: options.contains(.indexed) || property.isToOne,
                        references: property.isToOne ? property.destination.map { $0.rootDescription.name } : nil))
                }
            }
            let table = Table(name: root.name, columns: columns, familyCount: family.count)
            tables.append(table)
            for (code, member) in family.enumerated() {
                member.entityCode = Int64(code + 1)
                let superentity = member.description_.superentity.flatMap { byDescription[ObjectIdentifier($0)] }
                for property in member.properties where property.isStored {
                    property.column = columnIndex[property.name]!
                }
                member.resolve(superentity: superentity, family: family.filter { member.includes($0) }, table: table)
            }
        }
        for entity in entities {
            for property in entity.properties where property.isToMany {
                if let inverse = property.inverse, inverse.isToOne {
                    property.storage = .inverseColumn
                    continue
                }
                property.storage = .joinTable
                let ownSide = "\(entity.rootDescription.name)_\(property.name)"
                if let inverse = property.inverse, let destination = property.destination {
                    let otherSide = "\(destination.rootDescription.name)_\(inverse.name)"
                    let name = "Z_" + [ownSide, otherSide].sorted().joined(separator: "_")
                    property.isJoinSource = ownSide <= otherSide
                    property.joinTable = joinTables[name] ?? JoinTable(name: name)
                    joinTables[name] = property.joinTable
                } else {
                    let name = "Z_" + ownSide
                    property.joinTable = joinTables[name] ?? JoinTable(name: name)
                    joinTables[name] = property.joinTable
                }
            }
        }
        return (tables, joinTables.keys.sorted().map { joinTables[$0]! })
    }

    /// The text a store keeps in `Z_METADATA` to know which model wrote it (and to migrate from).
    package static func describe(tables: [Table], joinTables: [JoinTable], entities: [ResolvedEntity]) -> String {
        var lines: [String] = []
        for table in tables {
            let columns = table.columns.map {
                "\($0.name):\($0.type)\($0.isIndexed ? ":indexed" : "")\($0.references.map { "->" + $0 } ?? "")"
            }
            lines.append("table \(table.name)\(table.hasEntityColumn ? " +entity" : "") " + columns.joined(separator: ","))
            for constraint in table.uniqueConstraints {
                lines.append("unique \(constraint.entity.name) \(constraint.keys.joined(separator: ","))")
            }
        }
        for join in joinTables { lines.append("join \(join.name)") }
        for entity in entities {
            // `?` marks optional attributes: making one non-optional must migrate (fill NULLs).
            lines.append("entity \(entity.name) \(entity.entityCode) " + entity.properties.map { $0.isAttribute && $0.isOptional ? $0.name + "?" : $0.name }.joined(separator: ","))
        }
        return lines.joined(separator: "\n")
    }

    package static func fnv1a(_ text: String) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return String(hash, radix: 16)
    }
}
