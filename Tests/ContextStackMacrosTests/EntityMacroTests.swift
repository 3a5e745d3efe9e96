import ContextStackMacros
import SwiftSyntaxMacroExpansion
import SwiftSyntaxMacros
import SwiftSyntaxMacrosGenericTestSupport
import Testing

private let macros: [String: MacroSpec] = [
    "Entity": MacroSpec(type: EntityMacro.self, conformances: ["Sendable"]),
    "_PersistedProperty": MacroSpec(type: PersistedPropertyMacro.self),
    "Attribute": MacroSpec(type: MarkerMacro.self),
    "Relationship": MacroSpec(type: MarkerMacro.self),
    "Transient": MacroSpec(type: MarkerMacro.self),
]

private func expect(_ source: String, expands expected: String, diagnostics: [DiagnosticSpec] = [],
                    sourceLocation: SourceLocation = #_sourceLocation) {
    assertMacroExpansion(source, expandedSource: expected, diagnostics: diagnostics, macroSpecs: macros) { failure in
        Issue.record(Comment(rawValue: failure.message), sourceLocation: sourceLocation)
    }
}

@Suite struct EntityMacroTests {
    @Test func expandsAttributesRelationshipsAndTheDescription() {
        expect(
            """
            @Entity final class Person: ManagedObject {
                var name: String = ""
                @Attribute(.unique) var email: String?
                @Transient var scratch = 0
                @Relationship(deleteRule: .cascade, inverse: \\Pet.owner) var pets: Set<Pet>
                @Relationship var friend: Person?
                var computed: Int { 1 }
            }
            """,
            expands: """
            final class Person: ManagedObject {
                @ContextStack._PersistedProperty(0, .attribute)
                var name: String = ""
                @ContextStack._PersistedProperty(1, .attribute) var email: String?
                var scratch = 0
                @ContextStack._PersistedProperty(2, .toMany) var pets: Set<Pet>
                @ContextStack._PersistedProperty(3, .toOne) var friend: Person?
                var computed: Int { 1 }

                nonisolated static let _cs_entity_Person = ContextStack.EntityDescription(
                    name: "Person", type: Person.self, superentity: nil,
                    properties: [
                        .attribute("name", String.self, default: ""),
                        .attribute("email", String?.self, default: nil, options: [.unique]),
                        .toMany("pets", Pet.self, inverse: "owner", deleteRule: .cascade),
                        .toOne("friend", Person.self)
                    ])

                override class var entityDescription: ContextStack.EntityDescription {
                    _cs_entity_Person
                }

                static func _cs_key_Person<R: Person>(_ keyPath: AnyKeyPath, root: R.Type) -> String? {
                    if keyPath == \\R.name as AnyKeyPath {
                        return "name"
                    }
                    if keyPath == \\R.email as AnyKeyPath {
                        return "email"
                    }
                    if keyPath == \\R.pets as AnyKeyPath {
                        return "pets"
                    }
                    if keyPath == \\R.friend as AnyKeyPath {
                        return "friend"
                    }
                    return nil
                }

                override class func _cs_key(for keyPath: AnyKeyPath) -> String? {
                    _cs_key_Person(keyPath, root: self)
                }
            }

            extension Person: @unchecked Sendable {
            }
            """
        )
    }

    @Test func originalNamesReachTheDescription() {
        expect(
            """
            @Entity(name: "Product", originalName: "Item") final class Product: ManagedObject {
                @Attribute(.indexed, originalName: "title") var heading: String = ""
            }
            """,
            expands: """
            final class Product: ManagedObject {
                @ContextStack._PersistedProperty(0, .attribute) var heading: String = ""

                nonisolated static let _cs_entity_Product = ContextStack.EntityDescription(
                    name: "Product", type: Product.self, superentity: nil,
                    properties: [
                        .attribute("heading", String.self, default: "", options: [.indexed], originalName: "title")
                    ], originalName: "Item")

                override class var entityDescription: ContextStack.EntityDescription {
                    _cs_entity_Product
                }

                static func _cs_key_Product<R: Product>(_ keyPath: AnyKeyPath, root: R.Type) -> String? {
                    if keyPath == \\R.heading as AnyKeyPath {
                        return "heading"
                    }
                    return nil
                }

                override class func _cs_key(for keyPath: AnyKeyPath) -> String? {
                    _cs_key_Product(keyPath, root: self)
                }
            }

            extension Product: @unchecked Sendable {
            }
            """
        )
    }

    @Test func subEntitiesNumberSlotsAfterTheirParent() {
        expect(
            """
            @Entity(name: "Coder") public final class Engineer: Staff {
                var language: String = "Swift"
            }
            """,
            expands: """
            public final class Engineer: Staff {
                @ContextStack._PersistedProperty(Engineer._cs_entity_Engineer.slotBase + 0, .attribute)
                var language: String = "Swift"

                public nonisolated static let _cs_entity_Engineer = ContextStack.EntityDescription(
                    name: "Coder", type: Engineer.self, superentity: Staff.entityDescription,
                    properties: [
                        .attribute("language", String.self, default: "Swift")
                    ])

                public override class var entityDescription: ContextStack.EntityDescription {
                    _cs_entity_Engineer
                }

                public static func _cs_key_Engineer<R: Engineer>(_ keyPath: AnyKeyPath, root: R.Type) -> String? {
                    if keyPath == \\R.language as AnyKeyPath {
                        return "language"
                    }
                    return Staff._cs_key_Staff(keyPath, root: R.self)
                }

                public override class func _cs_key(for keyPath: AnyKeyPath) -> String? {
                    _cs_key_Engineer(keyPath, root: self)
                }
            }

            extension Engineer: @unchecked Sendable {
            }
            """
        )
    }

    @Test func aNonOptionalAttributeWithoutDefaultIsAnError() {
        expect(
            """
            @Entity final class Broken: ManagedObject {
                var name: String
            }
            """,
            expands: """
            final class Broken: ManagedObject {
                @ContextStack._PersistedProperty(0, .attribute)
                var name: String

                nonisolated static let _cs_entity_Broken = ContextStack.EntityDescription(
                    name: "Broken", type: Broken.self, superentity: nil,
                    properties: [
                        .attribute("name", String.self, default: nil)
                    ])

                override class var entityDescription: ContextStack.EntityDescription {
                    _cs_entity_Broken
                }

                static func _cs_key_Broken<R: Broken>(_ keyPath: AnyKeyPath, root: R.Type) -> String? {
                    if keyPath == \\R.name as AnyKeyPath {
                        return "name"
                    }
                    return nil
                }

                override class func _cs_key(for keyPath: AnyKeyPath) -> String? {
                    _cs_key_Broken(keyPath, root: self)
                }
            }

            extension Broken: @unchecked Sendable {
            }
            """,
            diagnostics: [
                DiagnosticSpec(message: "'name' is not optional and has no default value: write 'var name: String = <default>' or make it optional ('String?')", line: 2, column: 9),
            ]
        )
    }

    @Test func aPropertyWithoutTypeIsAnErrorAndAStructIsRejected() {
        expect(
            """
            @Entity final class Untyped: ManagedObject {
                var count = 0
            }
            """,
            expands: """
            final class Untyped: ManagedObject {
                var count = 0

                nonisolated static let _cs_entity_Untyped = ContextStack.EntityDescription(
                    name: "Untyped", type: Untyped.self, superentity: nil,
                    properties: [])

                override class var entityDescription: ContextStack.EntityDescription {
                    _cs_entity_Untyped
                }

                static func _cs_key_Untyped<R: Untyped>(_ keyPath: AnyKeyPath, root: R.Type) -> String? {
                    return nil
                }

                override class func _cs_key(for keyPath: AnyKeyPath) -> String? {
                    _cs_key_Untyped(keyPath, root: self)
                }
            }

            extension Untyped: @unchecked Sendable {
            }
            """,
            diagnostics: [
                DiagnosticSpec(message: "'count' needs a type annotation to be persisted ('var count: Int = 0'), or mark it @Transient", line: 2, column: 9),
            ]
        )
        expect(
            """
            @Entity struct NotAClass {
            }
            """,
            expands: """
            struct NotAClass {
            }
            """,
            diagnostics: [
                DiagnosticSpec(message: "@Entity applies to a class that inherits from ManagedObject: '@Entity final class Person: ManagedObject { ... }'", line: 1, column: 1),
            ]
        )
    }

    @Test func aRelationshipMustBeOptionalOrASet() {
        expect(
            """
            @Entity final class Owner: ManagedObject {
                @Relationship var pet: Pet
            }
            """,
            expands: """
            final class Owner: ManagedObject {
                var pet: Pet

                nonisolated static let _cs_entity_Owner = ContextStack.EntityDescription(
                    name: "Owner", type: Owner.self, superentity: nil,
                    properties: [])

                override class var entityDescription: ContextStack.EntityDescription {
                    _cs_entity_Owner
                }

                static func _cs_key_Owner<R: Owner>(_ keyPath: AnyKeyPath, root: R.Type) -> String? {
                    return nil
                }

                override class func _cs_key(for keyPath: AnyKeyPath) -> String? {
                    _cs_key_Owner(keyPath, root: self)
                }
            }

            extension Owner: @unchecked Sendable {
            }
            """,
            diagnostics: [
                DiagnosticSpec(message: "relationship 'pet' must be optional (to-one: 'Person?') or a set (to-many: 'Set<Person>')", line: 2, column: 23),
            ]
        )
    }

    /// (The test harness drops the initializer; the compiler keeps it as the init accessor's
    /// initial value, which is what lets entity classes inherit `init(_:)`.)
    @Test func persistedPropertiesBecomeSlotAccessors() {
        expect(
            """
            final class Person: ManagedObject {
                @_PersistedProperty(0, .attribute) var name: String = ""
                @_PersistedProperty(1, .attribute) var email: String?
                @_PersistedProperty(2, .toMany) var pets: Set<Pet>
                @_PersistedProperty(3, .toOne) var friend: Person?
            }
            """,
            expands: """
            final class Person: ManagedObject {
                var name: String {
                    init(initialValue) {
                    }
                    get {
                        _cs_get(0)
                    }
                    set {
                        _cs_set(0, newValue)
                    }
                }
                var email: String? {
                    get {
                        _cs_get(1)
                    }
                    set {
                        _cs_set(1, newValue)
                    }
                }
                var pets: Set<Pet> {
                    get {
                        _cs_toMany(2)
                    }
                    set {
                        _cs_setToMany(2, newValue)
                    }
                }
                var friend: Person? {
                    get {
                        _cs_toOne(3)
                    }
                    set {
                        _cs_setToOne(3, newValue)
                    }
                }
            }
            """
        )
    }

    @Test func passesCompoundUniquenessToTheDescription() {
        expect(
            """
            @Entity(unique: [["first", "last"]]) final class Member: ManagedObject {
                var first: String = ""
                var last: String = ""
            }
            """,
            expands: """
            final class Member: ManagedObject {
                @ContextStack._PersistedProperty(0, .attribute)
                var first: String = ""
                @ContextStack._PersistedProperty(1, .attribute)
                var last: String = ""

                nonisolated static let _cs_entity_Member = ContextStack.EntityDescription(
                    name: "Member", type: Member.self, superentity: nil,
                    properties: [
                        .attribute("first", String.self, default: ""),
                        .attribute("last", String.self, default: "")
                    ], unique: [["first", "last"]])

                override class var entityDescription: ContextStack.EntityDescription {
                    _cs_entity_Member
                }

                static func _cs_key_Member<R: Member>(_ keyPath: AnyKeyPath, root: R.Type) -> String? {
                    if keyPath == \\R.first as AnyKeyPath {
                        return "first"
                    }
                    if keyPath == \\R.last as AnyKeyPath {
                        return "last"
                    }
                    return nil
                }

                override class func _cs_key(for keyPath: AnyKeyPath) -> String? {
                    _cs_key_Member(keyPath, root: self)
                }
            }

            extension Member: @unchecked Sendable {
            }
            """
        )
    }
}
