import Foundation
import _ContextStackCore

/// What to do with related objects when an object is deleted.
public enum DeleteRule: String, Sendable, Hashable {
    /// Remove the deleted object from the inverse relationship of each related object (the default).
    case nullify
    /// Delete the related objects too.
    case cascade
    /// Refuse the deletion while the relationship is not empty: `commit()` throws.
    case deny
    /// Do nothing: related objects keep pointing at the deleted object's ID.
    case noAction
}

/// Options of an attribute: `@Attribute(.unique)`, `@Attribute(.indexed)`.
public struct AttributeOption: Hashable, Sendable {
    enum Kind: Hashable, Sendable { case unique, indexed }
    let kind: Kind
    /// No two objects of the entity (sub-entities included) may hold the same non-nil value:
    /// `commit()` throws `SaveError.Code.uniquenessViolated` and saves nothing of the commit.
    /// A unique index backs it in SQLite. See Docs/Writing.md.
    public static let unique = AttributeOption(kind: .unique)
    /// An index backs the attribute, for fast predicates and sorting.
    public static let indexed = AttributeOption(kind: .indexed)
}

/// One persisted property of an entity as the `@Entity` macro declares it.
public struct PropertyDescription: Sendable {
    enum Kind: Sendable {
        case attribute(AttributeKind, isOptional: Bool, defaultValue: Value, options: Set<AttributeOption>)
        case relationship(destination: @Sendable () -> EntityDescription, isToMany: Bool, inverse: String?, deleteRule: DeleteRule)
    }

    /// The property's name, as written in Swift and as used in predicates.
    public let name: String
    let kind: Kind
    /// The name in the previous model version (`@Attribute(originalName:)`,
    /// `@Relationship(originalName:)`), for migration.
    public let originalName: String?
    /// For an attribute: a stored value as the attribute's Swift type reads it, stored again;
    /// `nil` when it does not fit (an accessor or snapshot then shows the default, or `nil`).
    /// What `apply(_:expecting:)` compares: a client's snapshot was read through the type, so
    /// a stored `"12.50"` came back as `12.5`, `2.0` in a `Bool` column as `true`, and an enum's
    /// unknown raw value as the default case.
    let asRead: (any StoredValueReading)?

    /// Whether `value`, in the form the attribute stores, is none of the raw values of its
    /// `RawRepresentable` type (read back, it would be the property's default, or nil).
    package func isNoneOfItsCases(_ value: Value) -> Bool {
        guard let cases = asRead as? any RawValueReading else { return false }
        return cases.read(value) == nil
    }

    init(name: String, kind: Kind, originalName: String? = nil, asRead: (any StoredValueReading)? = nil) {
        self.name = name
        self.kind = kind
        self.originalName = originalName
        self.asRead = asRead
    }

    /// An attribute of an `AttributeValue` type.
    public static func attribute<T: AttributeValue>(
        _ name: String, _ type: T.Type, default defaultValue: T, options: [AttributeOption] = [],
        originalName: String? = nil
    ) -> PropertyDescription {
        PropertyDescription(name: name, kind: .attribute(T.attributeKind, isOptional: T.isOptionalAttribute,
                                                         defaultValue: defaultValue.storedValue, options: Set(options)),
                            originalName: originalName, asRead: ReadThrough<T>())
    }

    /// An attribute of a `RawRepresentable` type, stored through its raw value.
    public static func attribute<T: RawRepresentable>(
        _ name: String, _ type: T.Type, default defaultValue: T, options: [AttributeOption] = [],
        originalName: String? = nil
    ) -> PropertyDescription where T.RawValue: AttributeValue {
        PropertyDescription(name: name, kind: .attribute(T.RawValue.attributeKind, isOptional: false,
                                                         defaultValue: defaultValue.rawValue.storedValue, options: Set(options)),
                            originalName: originalName,
                            asRead: ReadThroughRaw<T>(optional: false))
    }

    /// An optional attribute of a `RawRepresentable` type.
    public static func attribute<T: RawRepresentable>(
        _ name: String, _ type: T?.Type, default defaultValue: T?, options: [AttributeOption] = [],
        originalName: String? = nil
    ) -> PropertyDescription where T.RawValue: AttributeValue {
        PropertyDescription(name: name, kind: .attribute(T.RawValue.attributeKind, isOptional: true,
                                                         defaultValue: defaultValue?.rawValue.storedValue ?? .null, options: Set(options)),
                            originalName: originalName,
                            asRead: ReadThroughRaw<T>(optional: true))
    }

    /// A relationship to one object of `destination` (or none).
    public static func toOne<T: ManagedObject>(
        _ name: String, _ destination: T.Type, inverse: String? = nil, deleteRule: DeleteRule = .nullify,
        originalName: String? = nil
    ) -> PropertyDescription {
        PropertyDescription(name: name, kind: .relationship(destination: { T.entityDescription }, isToMany: false,
                                                            inverse: inverse, deleteRule: deleteRule),
                            originalName: originalName)
    }

    /// A relationship to a set of objects of `destination`.
    public static func toMany<T: ManagedObject>(
        _ name: String, _ destination: T.Type, inverse: String? = nil, deleteRule: DeleteRule = .nullify,
        originalName: String? = nil
    ) -> PropertyDescription {
        PropertyDescription(name: name, kind: .relationship(destination: { T.entityDescription }, isToMany: true,
                                                            inverse: inverse, deleteRule: deleteRule),
                            originalName: originalName)
    }
}

/// An entity as the `@Entity` macro declares it: its name, class, parent entity and properties.
///
/// One description exists per entity class, for the life of the process; a `Model` resolves
/// descriptions against each other (inverses, destinations) and derives the schema.
public final class EntityDescription: Sendable, CustomStringConvertible {
    /// The entity's name: the class name unless `@Entity(name:)` says otherwise.
    public let name: String
    let type: ManagedObject.Type
    /// The parent entity, for a sub-entity.
    public let superentity: EntityDescription?
    /// The entity's name in the previous model version (`@Entity(originalName:)`), for migration.
    public let originalName: String?
    /// The properties declared by this entity's own class (not inherited ones).
    public let ownProperties: [PropertyDescription]
    /// All properties, inherited ones first; a property's index here is its slot.
    let properties: [PropertyDescription]
    /// Compound uniqueness constraints declared by this entity (`@Entity(unique:)`), each a
    /// list of property names; single `.unique` attributes are in their options instead.
    public let uniqueness: [[String]]

    public init(name: String, type: ManagedObject.Type, superentity: EntityDescription?, properties: [PropertyDescription],
                originalName: String? = nil, unique: [[String]] = []) {
        self.name = name
        self.originalName = originalName
        self.type = type
        self.superentity = superentity
        self.ownProperties = properties
        self.properties = (superentity?.properties ?? []) + properties
        self.uniqueness = unique
    }

    /// The first slot of this class's own properties: the number of inherited properties.
    public var slotBase: Int { superentity?.properties.count ?? 0 }

    /// The entity at the top of this entity's hierarchy, whose table it shares.
    var root: EntityDescription { superentity?.root ?? self }

    public var description: String { name }
}

/// Reads a stored value through an attribute's Swift type and stores it again
/// (`PropertyDescription.asRead`); `nil` when it does not fit.
protocol StoredValueReading: Sendable {
    func read(_ value: Value) -> Value?
}

/// An attribute of an `AttributeValue` type.
struct ReadThrough<T: AttributeValue>: StoredValueReading {
    func read(_ value: Value) -> Value? { T(storedValue: value)?.storedValue }
}

/// An attribute of a type with cases (`ReadThroughRaw`).
protocol RawValueReading: StoredValueReading {}

/// An attribute stored through a raw value: a value that is none of the type's raw values
/// does not fit.
struct ReadThroughRaw<T: RawRepresentable>: RawValueReading where T.RawValue: AttributeValue {
    let optional: Bool

    func read(_ value: Value) -> Value? {
        if optional && value.isNull { return .null }
        return T.RawValue(storedValue: value).flatMap(T.init(rawValue:))?.rawValue.storedValue
    }
}
