import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// Makes a class a persisted entity.
///
/// For example:
///
/// ```swift
/// @Entity final class Person: ManagedObject {
///     var name: String = ""                 // non-optional attributes need a default
///     var location: String?
///     @Attribute(.unique) var email: String?
///     @Transient var scratch = 0            // not stored
///     @Relationship(inverse: \Person.friendOf) var friend: Person?
///     @Relationship var friendOf: Set<Person>
/// }
/// ```
///
/// The macro turns each persisted property into accessors over the object's slots, generates
/// the entity's static description, and restates `@unchecked Sendable` (see `ManagedObject`).
/// For a root entity it also generates `Person.Snapshot` — a `Sendable`, `Hashable`, `Codable`
/// copy of the object's values with relationships as `ObjectID`s — and `person.snapshot`
/// (Docs/Servers.md); sub-entities share their root's, and an entity with a persisted property
/// named `id` or `snapshot` gets none.
/// Sub-entities: declare the parent without `final` and subclass it with `@Entity` too.
///
/// - Parameters:
///   - name: the entity's name in the store; the class name by default.
///   - originalName: the entity's name in the previous model version, when it was renamed:
///     opening a store written by that version renames the table and keeps its rows.
///   - unique: compound uniqueness constraints, each a list of property names whose values
///     together may occur only once (`unique: [["firstName", "lastName"]]`); a single
///     attribute is made unique with `@Attribute(.unique)`. See Docs/Writing.md.
@attached(member, names: arbitrary)
@attached(memberAttribute)
@attached(extension, conformances: Sendable, SnapshotProviding)
public macro Entity(name: String? = nil, originalName: String? = nil, unique: [[String]] = []) = #externalMacro(module: "ContextStackMacros", type: "EntityMacro")

/// Options for an attribute: `@Attribute(.unique)`, `@Attribute(.indexed)`.
///
/// - Parameters:
///   - options: `.unique`, `.indexed`.
///   - originalName: the attribute's name in the previous model version, when it was renamed
///     (`@Attribute(originalName: "fullName") var name: String = ""`): opening a store written by
///     that version moves the old column's values into the new one.
@attached(peer)
public macro Attribute(_ options: AttributeOption..., originalName: String? = nil) = #externalMacro(module: "ContextStackMacros", type: "MarkerMacro")

/// A property that is not stored: it keeps its value only in the object in memory.
@attached(peer)
public macro Transient() = #externalMacro(module: "ContextStackMacros", type: "MarkerMacro")

/// A relationship: to-one (`Person?`) or to-many (`Set<Person>`).
///
/// - Parameters:
///   - deleteRule: what deleting this object does to the related ones (`.nullify` by default).
///   - inverse: the relationship on the other side that points back (`\Person.friendOf`). One
///     side declaring it is enough; both sides are kept in sync in memory as soon as either is set.
///   - originalName: the relationship's name in the previous model version, when it was renamed
///     (`@Relationship(originalName: "owner") var keeper: Person?`): opening a store written by
///     that version keeps its references (a to-one's column, a to-many's pairs) under the new
///     name (Docs/Stores.md, "Migration").
@attached(peer)
public macro Relationship(deleteRule: DeleteRule = .nullify, inverse: AnyKeyPath? = nil, originalName: String? = nil) = #externalMacro(module: "ContextStackMacros", type: "MarkerMacro")

/// How `@_PersistedProperty` stores a property. Used by the `@Entity` expansion only.
public enum _PersistedPropertyKind {
    case attribute, toOne, toMany
}

/// The slot accessors of one persisted property; attached by `@Entity`, not written by hand.
@attached(accessor, names: named(init), named(get), named(set))
public macro _PersistedProperty(_ slot: Int, _ kind: _PersistedPropertyKind) = #externalMacro(module: "ContextStackMacros", type: "PersistedPropertyMacro")
