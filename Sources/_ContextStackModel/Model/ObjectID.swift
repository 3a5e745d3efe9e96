import _ContextStackCore

/// The permanent identity of a managed object: its entity hierarchy and primary key.
///
/// An object has its ID from the moment it is created (the store reserves primary keys), and
/// keeps it in every context, before and after commit. IDs are `Sendable`: pass them between
/// contexts and threads, and bring the object into another context with `fetch(_:id:)` or
/// `update.use(_:)`.
///
/// An ID's text form is `"Person/12"` (the root entity's name and the primary key): it
/// round-trips through `ObjectID(_:)` and through `Codable`, which encodes that string, so an
/// ID can travel in JSON or, percent-encoded, in a URL. Reading one back needs the entity in a
/// `Model` made in this process.
public struct ObjectID: Hashable, Sendable, CustomStringConvertible, Comparable, LosslessStringConvertible, Codable {
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

    /// The ID in one word: the key with the entity's address folded in, multiplied by an odd
    /// constant so that two entities' keys do not line up. What `hash(into:)` feeds `Hasher`
    /// (hashing two words cost a fifth more), and what `Registry` places IDs by.
    package var word: UInt64 {
        UInt64(bitPattern: primaryKey) &+ UInt64(UInt(bitPattern: ObjectIdentifier(rootEntity))) &* 0x9E37_79B9_7F4A_7C15
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(word)
    }

    /// Orders by entity name, then primary key.
    public static func < (lhs: ObjectID, rhs: ObjectID) -> Bool {
        lhs.rootEntity === rhs.rootEntity ? lhs.primaryKey < rhs.primaryKey : lhs.rootEntity.name < rhs.rootEntity.name
    }

    public var description: String { "\(rootEntity.name)/\(primaryKey)" }

    /// The ID `description` names (`"Person/12"`), or `nil` when the text is not an ID or names
    /// no entity at the top of a hierarchy in a `Model` made in this process (the latest
    /// model wins when two name the same entity).
    public init?(_ description: String) {
        guard let (name, primaryKey) = Self.parse(description),
              let root = Self.roots.withLock({ $0[name] }) else { return nil }
        self.init(rootEntity: root, primaryKey: primaryKey)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let id = ObjectID(text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "'\(text)' is not an object ID of a model made in this process (\"<Entity>/<primary key>\").")
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }

    /// The entity name and primary key of `"Person/12"`.
    static func parse(_ text: String) -> (String, Int64)? {
        guard let slash = text.lastIndex(of: "/"), slash != text.startIndex,
              let key = Int64(text[text.index(after: slash)...]) else { return nil }
        return (String(text[..<slash]), key)
    }

    /// The root entities of the models made in this process, by name, for `init?(_:)`.
    private static let roots = Locked<[String: EntityDescription]>([:])

    /// Makes the root entities of a new model known to `init?(_:)`.
    static func register(_ entities: [ResolvedEntity]) {
        roots.withLock { roots in
            for entity in entities where entity.superentity == nil { roots[entity.name] = entity.description_ }
        }
    }
}
