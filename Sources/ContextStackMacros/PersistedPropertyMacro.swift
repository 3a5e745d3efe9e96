import SwiftSyntax
import SwiftSyntaxMacros

/// `@_PersistedProperty(slot, .kind)`, attached by `@Entity` to each persisted property: turns
/// the stored property into accessors that read and write the object's slot.
public struct PersistedPropertyMacro: AccessorMacro {
    public static func expansion(
        of node: AttributeSyntax,
        providingAccessorsOf declaration: some DeclSyntaxProtocol,
        in context: some MacroExpansionContext
    ) throws -> [AccessorDeclSyntax] {
        guard case .argumentList(let arguments) = node.arguments, arguments.count == 2,
              let slot = arguments.first?.expression.trimmedDescription,
              let kind = arguments.last?.expression.trimmedDescription
        else { return [] }
        let hasInitializer = declaration.as(VariableDeclSyntax.self)?.bindings.first?.initializer != nil
        var accessors: [AccessorDeclSyntax] = []
        if hasInitializer {
            // The initial value is the entity's default, recorded in its description; objects
            // take their values from their context, so the init accessor stores nothing.
            accessors.append("init(initialValue) {}")
        }
        switch kind {
        case ".toOne":
            accessors.append("get { _cs_toOne(\(raw: slot)) }")
            accessors.append("set { _cs_setToOne(\(raw: slot), newValue) }")
        case ".toMany":
            accessors.append("get { _cs_toMany(\(raw: slot)) }")
            accessors.append("set { _cs_setToMany(\(raw: slot), newValue) }")
        default:
            accessors.append("get { _cs_get(\(raw: slot)) }")
            accessors.append("set { _cs_set(\(raw: slot), newValue) }")
        }
        return accessors
    }
}
