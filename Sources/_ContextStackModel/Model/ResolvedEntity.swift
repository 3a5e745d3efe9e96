import Foundation
import _ContextStackCore

/// An entity resolved within a `Model`: its properties with slots, destinations and inverses,
/// and where it lives in the schema. Immutable once the model is built.
package final class ResolvedEntity: Sendable, CustomStringConvertible {
    package let description_: EntityDescription
    package let name: String
    let type: ManagedObject.Type
    package let properties: [Property]
    let propertyIndex: [String: Int]
    /// The initial slot values of a new object: attribute defaults, `.null` elsewhere.
    package let defaults: ContiguousArray<Value>
    /// This entity and every entity below it (for fetches that include sub-entities).
    @exclusivity(unchecked) package nonisolated(unsafe) private(set) var family: [ResolvedEntity] = []
    @exclusivity(unchecked) package nonisolated(unsafe) private(set) var superentity: ResolvedEntity?
    @exclusivity(unchecked) package nonisolated(unsafe) private(set) var table: Table!
    /// The value of the table's entity column for rows of this entity (when the table has one).
    @exclusivity(unchecked) package nonisolated(unsafe) var entityCode: Int64 = 0
    /// The slots of attribute and to-one properties, in column order of this entity's own row.
    @exclusivity(unchecked) package nonisolated(unsafe) private(set) var storedSlots: [Int] = []
    /// The slots of to-one relationships: the references a row of this entity holds.
    @exclusivity(unchecked) package nonisolated(unsafe) private(set) var toOneSlots: [Int] = []
    /// `storedSlots`, each with its column's position in a whole-row SELECT of the table
    /// (`Z_PK`, then `Z_ENT` when the table has it, then the table's columns): how a row's read
    /// fills an object's slots. Its memory is this entity's, freed in `deinit`.
    @exclusivity(unchecked) nonisolated(unsafe) private(set) var rowLayout = ColumnSlots.none
    /// For each slot, the position of its column in a whole-row SELECT of the table; -1 for a
    /// slot with no column (a to-many relationship).
    @exclusivity(unchecked) nonisolated(unsafe) private(set) var slotPositions: [Int] = []
    /// The uniqueness constraints rows of this entity obey: its own and its parents'.
    @exclusivity(unchecked) package nonisolated(unsafe) var uniqueConstraints: [UniqueConstraint] = []
    /// The slots that take part in a uniqueness constraint.
    @exclusivity(unchecked) package nonisolated(unsafe) var uniqueSlots: Set<Int> = []

    /// The SQL text of this entity's queries for stored windows, by the shape of their
    /// condition (`CompiledQuery.windowSQL`). Shared by every context and store of the model.
    let windowTexts = Locked<[CompiledQuery.Shape: String]>([:])

    package var description: String { name }
    package var rootDescription: EntityDescription { description_.root }

    init(_ description: EntityDescription) {
        self.description_ = description
        self.name = description.name
        self.type = description.type
        var index: [String: Int] = [:]
        var defaults = ContiguousArray<Value>()
        var properties: [Property] = []
        for (slot, declared) in description.properties.enumerated() {
            index[declared.name] = slot
            properties.append(Property(slot: slot, declared: declared))
            if case .attribute(_, _, let value, _) = declared.kind { defaults.append(value) } else { defaults.append(.null) }
        }
        self.properties = properties
        self.propertyIndex = index
        self.defaults = defaults
    }

    // Resolution happens once, inside `Model.init`, before the model is shared: the
    // `nonisolated(unsafe)` members above are written only then. The properties' columns are
    // set before this is called. Being written only then, they are also read without Swift's
    // run-time exclusivity check (`@exclusivity(unchecked)`): a read of each of a fetch's rows
    // paid for one (`swift_beginAccess`, a look-up in the thread's access set).
    func resolve(superentity: ResolvedEntity?, family: [ResolvedEntity], table: Table) {
        self.superentity = superentity
        self.family = family
        self.table = table
        self.storedSlots = properties.filter { $0.isStored }.map(\.slot)
        self.toOneSlots = properties.filter { $0.isToOne }.map(\.slot)
        let base = table.hasEntityColumn ? 2 : 1
        self.slotPositions = properties.map { $0.isStored ? base + $0.column : -1 }
        rowLayout.deallocate()
        self.rowLayout = .allocate(positions: storedSlots.map { slotPositions[$0] }, slots: storedSlots)
    }

    deinit {
        rowLayout.deallocate()
    }

    /// The property called `name`. An entity of a few properties compares the names in turn:
    /// a short name is held inline and compared at once, which costs less than hashing it (a
    /// prefix query looked its key up twice, 580 instructions each, through the dictionary).
    package func property(named name: String) -> Property? {
        if properties.count <= Self.mostPropertiesScanned {
            for property in properties where property.name == name { return property }
            return nil
        }
        return propertyIndex[name].map { properties[$0] }
    }

    /// Up to this many properties, `property(named:)` compares names instead of hashing.
    static let mostPropertiesScanned = 12

    /// Whether `other` is this entity or one below it.
    package func includes(_ other: ResolvedEntity) -> Bool {
        // Through the descriptions, which are complete before the model resolves anything.
        var description: EntityDescription? = other.description_
        while let current = description {
            if current === description_ { return true }
            description = current.superentity
        }
        return false
    }
}

/// A property resolved within a model.
package final class Property: Sendable {
    package enum Storage: Sendable {
        /// A column of the entity's table (attributes and to-one relationships).
        case column
        /// Derived from the inverse to-one's column (a to-many whose inverse is to-one).
        case inverseColumn
        /// Rows of a join table (many-to-many, or a to-many without inverse).
        case joinTable
    }

    package let slot: Int
    package let name: String
    /// `name` as an SQL identifier, made once: every query that reads the property writes it.
    package let quotedName: String
    package let declared: PropertyDescription
    package let attributeKind: AttributeKind?
    package let isOptional: Bool
    let options: Set<AttributeOption>
    let isToMany: Bool
    package let deleteRule: DeleteRule
    // Written once during `Model.init`, before the model is shared.
    package nonisolated(unsafe) var destination: ResolvedEntity?
    package nonisolated(unsafe) var inverse: Property?
    package nonisolated(unsafe) var storage: Storage = .column
    package nonisolated(unsafe) var joinTable: JoinTable?
    /// Whether this property is the `source` side of its join table. Read it through
    /// `joinColumns` and the `LinkKey` helpers rather than choosing sides at each use.
    package nonisolated(unsafe) var isJoinSource = true
    /// The column in the entity's table, for attributes and to-one relationships.
    nonisolated(unsafe) var column: Int = -1

    init(slot: Int, declared: PropertyDescription) {
        self.slot = slot
        self.name = declared.name
        quotedName = declared.name.quotedIdentifier
        self.declared = declared
        switch declared.kind {
        case .attribute(let kind, let isOptional, _, let options):
            attributeKind = kind
            self.isOptional = isOptional
            self.options = options
            isToMany = false
            deleteRule = .nullify
        case .relationship(_, let isToMany, _, let deleteRule):
            attributeKind = nil
            isOptional = true
            options = []
            self.isToMany = isToMany
            self.deleteRule = deleteRule
        }
    }

    package var isAttribute: Bool { attributeKind != nil }
    package var isRelationship: Bool { attributeKind == nil }
    package var isToOne: Bool { isRelationship && !isToMany }

    /// The object a to-one's slot value points at; `nil` for any other property, or a value
    /// that holds no key.
    package func destinationID(of value: Value) -> ObjectID? {
        guard isToOne, let destination, case .integer(let key) = value else { return nil }
        return ObjectID(rootEntity: destination.rootDescription, primaryKey: key)
    }
    /// Attributes and to-one relationships have a column of their own.
    package var isStored: Bool { isAttribute || isToOne }
}

extension Property {
    /// The join-table columns of this relationship's own side and of its members' side: the
    /// one place that chooses between `source` and `target`.
    package var joinColumns: (mine: String, theirs: String) {
        isJoinSource ? ("source", "target") : ("target", "source")
    }
}
