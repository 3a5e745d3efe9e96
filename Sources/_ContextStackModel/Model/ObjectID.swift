import _ContextStackCore

/// The permanent identity of a managed object: its entity hierarchy and primary key.
///
/// An object has its ID from the moment it is created (the store reserves primary keys), and
/// keeps it in every context, before and after commit. IDs are `Sendable`: pass them between
/// contexts and threads, and bring the object into another context with `fetch(_:id:)` or
/// `update.use(_:)`.
public struct ObjectID: Hashable, Sendable, CustomStringConvertible, Comparable {
    /// The entity at the top of the object's hierarchy. ResolvedEntity descriptions live for the
    /// whole process (they are static members of the entity classes), hence `unowned(unsafe)`.
    package unowned(unsafe) let rootEntity: EntityDescription
    /// The object's primary key in the store.
    public let primaryKey: Int64

    package init(rootEntity: EntityDescription, primaryKey: Int64) {
        self.rootEntity = rootEntity
        self.primaryKey = primaryKey
    }

    /// The name of the entity whose table holds the object (the root of its hierarchy).
    public var entityName: String { rootEntity.name }

    public static func == (lhs: ObjectID, rhs: ObjectID) -> Bool {
        lhs.primaryKey == rhs.primaryKey && lhs.rootEntity === rhs.rootEntity
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(primaryKey)
        hasher.combine(ObjectIdentifier(rootEntity))
    }

    /// Orders by entity name, then primary key.
    public static func < (lhs: ObjectID, rhs: ObjectID) -> Bool {
        lhs.rootEntity === rhs.rootEntity ? lhs.primaryKey < rhs.primaryKey : lhs.rootEntity.name < rhs.rootEntity.name
    }

    public var description: String { "\(rootEntity.name)/\(primaryKey)" }
}
