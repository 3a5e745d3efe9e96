import SwiftDiagnostics
import SwiftSyntax
import SwiftSyntaxMacros

/// `@Entity`: reads the class's persisted properties, numbers their slots, attaches the slot
/// accessors, and generates the static entity description and the `Sendable` restatement.
public struct EntityMacro: MemberMacro, MemberAttributeMacro, ExtensionMacro {
    // MARK: Member: the entity description

    public static func expansion(
        of node: AttributeSyntax,
        providingMembersOf declaration: some DeclGroupSyntax,
        conformingTo protocols: [TypeSyntax],
        in context: some MacroExpansionContext
    ) throws -> [DeclSyntax] {
        guard let classDecl = declaration.as(ClassDeclSyntax.self) else {
            context.diagnose(Diagnostic(node: node, message: EntityDiagnostic.notAClass))
            return []
        }
        let className = classDecl.name.trimmedDescription
        let properties = persistedProperties(of: classDecl, in: context)
        let entityName = stringArgument("name", of: node) ?? "\"\(className)\""
        let originalName = stringArgument("originalName", of: node).map { ", originalName: \($0)" } ?? ""
        let superclass = superclassName(of: classDecl)
        let superentity = superclass.map { "\($0).entityDescription" } ?? "nil"
        let access = accessPrefix(of: classDecl)
        let unique = stringArgument("unique", of: node).map { ", unique: \($0)" } ?? ""

        var lines: [String] = []
        for property in properties {
            switch property.kind {
            case .attribute:
                var line = ".attribute(\"\(property.name)\", \(property.type).self, default: \(property.defaultExpression ?? "nil")"
                if let options = property.options, !options.isEmpty { line += ", options: [\(options)]" }
                if let originalName = property.originalName { line += ", originalName: \(originalName)" }
                lines.append(line + ")")
            case .toOne, .toMany:
                var line = property.kind == .toOne ? ".toOne" : ".toMany"
                line += "(\"\(property.name)\", \(property.destination ?? "Never").self"
                if let inverse = property.inverse { line += ", inverse: \"\(inverse)\"" }
                if let rule = property.deleteRule { line += ", deleteRule: \(rule)" }
                if let originalName = property.originalName { line += ", originalName: \(originalName)" }
                lines.append(line + ")")
            }
        }
        let list = lines.isEmpty ? "[]" : "[\n        " + lines.joined(separator: ",\n        ") + "\n    ]"
        return [
            """
            \(raw: access)nonisolated static let \(raw: staticName(className)) = ContextStack.EntityDescription(
                name: \(raw: entityName), type: \(raw: className).self, superentity: \(raw: superentity),
                properties: \(raw: list)\(raw: originalName)\(raw: unique))
            """,
            "\(raw: access)override class var entityDescription: ContextStack.EntityDescription { \(raw: staticName(className)) }",
            """
            \(raw: access)static func \(raw: keyFunctionName(className))<R: \(raw: className)>(_ keyPath: AnyKeyPath, root: R.Type) -> String? {
                \(raw: properties.map { "if keyPath == \\R.\($0.name) as AnyKeyPath { return \"\($0.name)\" }\n" }.joined())return \(raw: superclass.map { "\($0).\(keyFunctionName($0))(keyPath, root: R.self)" } ?? "nil")
            }
            """,
            "\(raw: access)override class func _cs_key(for keyPath: AnyKeyPath) -> String? { \(raw: keyFunctionName(className))(keyPath, root: self) }",
        ] + snapshotMembers(className: className, properties: properties, access: access, isRoot: superclass == nil)
    }

    // MARK: Member: the snapshot

    /// Whether the class gets a `Snapshot`: root entities do (a sub-entity shares its root's),
    /// unless a persisted property is named `id` or `snapshot`, which the snapshot uses.
    static func hasSnapshot(_ properties: [Persisted], isRoot: Bool) -> Bool {
        isRoot && !properties.contains { $0.name == "id" || $0.name == "snapshot" }
    }

    /// `Snapshot` — a Sendable, Hashable, Codable copy of the object's values with relationships
    /// as IDs — and the `snapshot` property that takes one.
    static func snapshotMembers(className: String, properties: [Persisted], access: String, isRoot: Bool) -> [DeclSyntax] {
        guard hasSnapshot(properties, isRoot: isRoot) else { return [] }
        let coding = "ContextStack._SnapshotCoding"
        var fields: [String] = []
        var parameters = ["id: ContextStack.ObjectID"]
        var assignments = ["self.id = id"]
        var reads = ["id = row.id"]
        var writes: [String] = []
        var decodes = ["id = try \(coding).decodeID(.id, of: \(className).self, in: container)"]
        var encodes = ["try \(coding).encode(id, CodingKeys.id, in: &container)"]
        for (slot, property) in properties.enumerated() {
            let name = property.name
            let type: String
            switch property.kind {
            case .attribute:
                type = property.type
                reads.append("\(name) = row.attribute(\(slot))")
                writes.append("row.set(\(slot), \(name))")
                decodes.append("\(name) = try \(coding).decode(.\(name), in: container)")
            case .toOne:
                type = "ContextStack.ObjectID?"
                reads.append("\(name) = row.toOne(\(slot))")
                writes.append("row.setToOne(\(slot), \(name))")
                decodes.append("\(name) = try \(coding).decodeToOne(.\(name), of: \(property.destination ?? "Never").self, in: container)")
            case .toMany:
                type = "[ContextStack.ObjectID]"
                reads.append("\(name) = row.toMany(\(slot))")
                writes.append("row.setToMany(\(slot), \(name))")
                decodes.append("\(name) = try \(coding).decodeToMany(.\(name), of: \(property.destination ?? "Never").self, in: container)")
            }
            fields.append("\(access)var \(name): \(type)")
            parameters.append("\(name): \(type)")
            assignments.append("self.\(name) = \(name)")
            encodes.append("try \(coding).encode(\(name), CodingKeys.\(name), in: &container)")
        }
        let keys = (["id"] + properties.map(\.name)).joined(separator: ", ")
        func block(_ lines: [String]) -> String { lines.map { "        " + $0 }.joined(separator: "\n") }
        return [
            """
            /// A Sendable, Hashable, Codable copy of a \(raw: className)'s values, generated by `@Entity`:
            /// its attributes, its ID, to-one relationships as `ObjectID?` and to-many ones as
            /// `[ObjectID]` (sorted). Read with `context.snapshots(\(raw: className).self, …)` or
            /// `object.snapshot`; write back with `update.apply(_:expecting:)`.
            \(raw: access)struct Snapshot: ContextStack.EntitySnapshot {
                \(raw: access)typealias Entity = \(raw: className)
                \(raw: access)let id: ContextStack.ObjectID
            \(raw: fields.map { "    " + $0 }.joined(separator: "\n"))

                \(raw: access)init(\(raw: parameters.joined(separator: ", "))) {
            \(raw: block(assignments))
                }

                /// The snapshot of `object`, as its context sees it (pending changes included).
                \(raw: access)init(_ object: \(raw: className)) {
                    self.init(_cs_row: object._cs_snapshotRow())
                }

                \(raw: access)init(_cs_row row: borrowing ContextStack._SnapshotRow) {
            \(raw: block(reads))
                }

                \(raw: access)func _cs_write(to row: inout ContextStack._SnapshotRow) {
            \(raw: block(writes))
                }

                private enum CodingKeys: String, CodingKey {
                    case \(raw: keys)
                }

                \(raw: access)init(from decoder: any Decoder) throws {
                    let container = try decoder.container(keyedBy: CodingKeys.self)
            \(raw: block(decodes))
                }

                \(raw: access)func encode(to encoder: any Encoder) throws {
                    var container = encoder.container(keyedBy: CodingKeys.self)
            \(raw: block(encodes))
                }
            }
            """,
            """
            /// A snapshot of this object's values, as its context sees them; taken where the object
            /// may be used (its context's execution).
            \(raw: access)var snapshot: Snapshot { Snapshot(self) }
            """,
        ]
    }

    // MARK: Member attributes: slot accessors

    public static func expansion(
        of node: AttributeSyntax,
        attachedTo declaration: some DeclGroupSyntax,
        providingAttributesFor member: some DeclSyntaxProtocol,
        in context: some MacroExpansionContext
    ) throws -> [AttributeSyntax] {
        guard let classDecl = declaration.as(ClassDeclSyntax.self),
              let variable = member.as(VariableDeclSyntax.self),
              let name = variable.bindings.first?.pattern.as(IdentifierPatternSyntax.self)?.identifier.trimmedDescription
        else { return [] }
        let properties = persistedProperties(of: classDecl, in: nil)
        guard let index = properties.firstIndex(where: { $0.name == name }) else { return [] }
        let slot = superclassName(of: classDecl) == nil
            ? "\(index)"
            : "\(classDecl.name.trimmedDescription).\(staticName(classDecl.name.trimmedDescription)).slotBase + \(index)"
        let kind: String
        switch properties[index].kind {
        case .attribute: kind = ".attribute"
        case .toOne: kind = ".toOne"
        case .toMany: kind = ".toMany"
        }
        return ["@ContextStack._PersistedProperty(\(raw: slot), \(raw: kind))"]
    }

    // MARK: Extension: restate Sendable, and provide snapshots

    public static func expansion(
        of node: AttributeSyntax,
        attachedTo declaration: some DeclGroupSyntax,
        providingExtensionsOf type: some TypeSyntaxProtocol,
        conformingTo protocols: [TypeSyntax],
        in context: some MacroExpansionContext
    ) throws -> [ExtensionDeclSyntax] {
        guard let classDecl = declaration.as(ClassDeclSyntax.self) else { return [] }
        var extensions = [try ExtensionDeclSyntax("extension \(type.trimmed): @unchecked Sendable {}")]
        if hasSnapshot(persistedProperties(of: classDecl, in: nil), isRoot: superclassName(of: classDecl) == nil) {
            extensions.append(try ExtensionDeclSyntax("extension \(type.trimmed): ContextStack.SnapshotProviding {}"))
        }
        return extensions
    }

    // MARK: Reading the class

    enum Kind: Equatable { case attribute, toOne, toMany }

    struct Persisted {
        let name: String
        let type: String
        let kind: Kind
        var defaultExpression: String?
        var options: String?
        /// The property's name in the previous model version, from `@Attribute(originalName:)`
        /// or `@Relationship(originalName:)`.
        var originalName: String?
        var destination: String?
        var inverse: String?
        var deleteRule: String?
    }

    /// The persisted stored properties of `classDecl`, in declaration order. Diagnoses
    /// properties that cannot be persisted when `context` is given.
    static func persistedProperties(of classDecl: ClassDeclSyntax, in context: (any MacroExpansionContext)?) -> [Persisted] {
        var result: [Persisted] = []
        for member in classDecl.memberBlock.members {
            guard let variable = member.decl.as(VariableDeclSyntax.self) else { continue }
            let modifiers = variable.modifiers.map(\.name.tokenKind)
            if modifiers.contains(.keyword(.static)) || modifiers.contains(.keyword(.class)) || modifiers.contains(.keyword(.lazy)) {
                continue
            }
            if attribute("Transient", in: variable) != nil { continue }
            guard variable.bindingSpecifier.tokenKind == .keyword(.var) else { continue }
            for binding in variable.bindings {
                guard let name = binding.pattern.as(IdentifierPatternSyntax.self)?.identifier.trimmedDescription else { continue }
                // A property with its own accessors is computed: not persisted.
                if let accessors = binding.accessorBlock {
                    if case .getter = accessors.accessors { continue }
                    if case .accessors(let list) = accessors.accessors,
                       list.contains(where: { [.keyword(.get), .keyword(.set)].contains($0.accessorSpecifier.tokenKind) }) {
                        continue
                    }
                }
                guard let typeSyntax = binding.typeAnnotation?.type else {
                    context?.diagnose(Diagnostic(node: binding, message: EntityDiagnostic.missingType(name)))
                    continue
                }
                let type = typeSyntax.trimmedDescription
                let isOptional = typeSyntax.is(OptionalTypeSyntax.self) || typeSyntax.is(ImplicitlyUnwrappedOptionalTypeSyntax.self)
                    || type.hasPrefix("Optional<")
                let initializer = binding.initializer?.value.trimmedDescription
                if let relationship = attribute("Relationship", in: variable) {
                    var persisted: Persisted
                    if let element = setElement(of: typeSyntax) {
                        persisted = Persisted(name: name, type: type, kind: .toMany, destination: element)
                    } else if isOptional {
                        let wrapped = typeSyntax.as(OptionalTypeSyntax.self)?.wrappedType.trimmedDescription ?? type
                        persisted = Persisted(name: name, type: type, kind: .toOne, destination: wrapped)
                    } else {
                        context?.diagnose(Diagnostic(node: binding, message: EntityDiagnostic.badRelationshipType(name)))
                        continue
                    }
                    if case .argumentList(let arguments) = relationship.arguments {
                        for argument in arguments {
                            switch argument.label?.text {
                            case "inverse":
                                if let keyPath = argument.expression.as(KeyPathExprSyntax.self),
                                   let last = keyPath.components.last?.component.as(KeyPathPropertyComponentSyntax.self) {
                                    persisted.inverse = last.declName.baseName.trimmedDescription
                                }
                            case "deleteRule":
                                persisted.deleteRule = argument.expression.trimmedDescription
                            case "originalName":
                                persisted.originalName = argument.expression.trimmedDescription
                            default: break
                            }
                        }
                    }
                    result.append(persisted)
                    continue
                }
                if !isOptional && initializer == nil {
                    context?.diagnose(Diagnostic(node: binding, message: EntityDiagnostic.missingDefault(name, type)))
                }
                var persisted = Persisted(name: name, type: type, kind: .attribute, defaultExpression: initializer)
                if let attributeNode = attribute("Attribute", in: variable), case .argumentList(let arguments) = attributeNode.arguments {
                    let options = arguments.filter { $0.label == nil }.map(\.expression.trimmedDescription)
                    persisted.options = options.joined(separator: ", ")
                    persisted.originalName = arguments.first { $0.label?.text == "originalName" }?.expression.trimmedDescription
                }
                result.append(persisted)
            }
        }
        return result
    }

    /// The static holding a class's description: named after the class, because a sub-entity
    /// cannot redeclare a static its parent already has.
    static func staticName(_ className: String) -> String { "_cs_entity_\(className)" }

    /// The function that names a key path rooted at (a subclass of) the class; per class, as
    /// statics cannot be overridden, and generic over the root so inherited properties match
    /// key paths of sub-entities (`\\Engineer.name`).
    static func keyFunctionName(_ className: String) -> String { "_cs_key_\(className)" }

    static func attribute(_ name: String, in variable: VariableDeclSyntax) -> AttributeSyntax? {
        for element in variable.attributes {
            guard let attribute = element.as(AttributeSyntax.self) else { continue }
            let attributeName = attribute.attributeName.trimmedDescription
            if attributeName == name || attributeName == "ContextStack.\(name)" { return attribute }
        }
        return nil
    }

    /// `Pet` for `Set<Pet>`.
    static func setElement(of type: TypeSyntax) -> String? {
        guard let identifier = type.as(IdentifierTypeSyntax.self), identifier.name.text == "Set",
              let argument = identifier.genericArgumentClause?.arguments.first
        else { return nil }
        return argument.argument.trimmedDescription
    }

    /// The superclass when it is another entity; `nil` when it is `ManagedObject`.
    static func superclassName(of classDecl: ClassDeclSyntax) -> String? {
        guard let first = classDecl.inheritanceClause?.inheritedTypes.first?.type.trimmedDescription else { return nil }
        return first == "ManagedObject" || first == "ContextStack.ManagedObject" ? nil : first
    }

    static func stringArgument(_ label: String, of node: AttributeSyntax) -> String? {
        guard case .argumentList(let arguments) = node.arguments else { return nil }
        return arguments.first { $0.label?.text == label }?.expression.trimmedDescription
    }

    static func accessPrefix(of classDecl: ClassDeclSyntax) -> String {
        let names = classDecl.modifiers.map(\.name.tokenKind)
        if names.contains(.keyword(.public)) || names.contains(.keyword(.open)) { return "public " }
        if names.contains(.keyword(.package)) { return "package " }
        return ""
    }
}

enum EntityDiagnostic: DiagnosticMessage {
    case notAClass
    case missingType(String)
    case missingDefault(String, String)
    case badRelationshipType(String)

    var message: String {
        switch self {
        case .notAClass:
            "@Entity applies to a class that inherits from ManagedObject: '@Entity final class Person: ManagedObject { ... }'"
        case .missingType(let name):
            "'\(name)' needs a type annotation to be persisted ('var \(name): Int = 0'), or mark it @Transient"
        case .missingDefault(let name, let type):
            "'\(name)' is not optional and has no default value: write 'var \(name): \(type) = <default>' or make it optional ('\(type)?')"
        case .badRelationshipType(let name):
            "relationship '\(name)' must be optional (to-one: 'Person?') or a set (to-many: 'Set<Person>')"
        }
    }

    var diagnosticID: MessageID { MessageID(domain: "ContextStack", id: "\(self)") }
    var severity: DiagnosticSeverity { .error }
}
