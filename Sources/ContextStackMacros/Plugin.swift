import SwiftCompilerPlugin
import SwiftSyntaxMacros

@main
struct ContextStackMacrosPlugin: CompilerPlugin {
    let providingMacros: [any Macro.Type] = [
        EntityMacro.self,
        PersistedPropertyMacro.self,
        MarkerMacro.self,
    ]
}
