// The ABI v1 exports. A plugin's entry file re-exports them (AssemblyScript
// exports only what the entry file exports):
//
//   export * from "@foldhost/sdk-assemblyscript/assembly/exports";
export { foldhost_abi_v1, foldhost_alloc, foldhost_info, foldhost_apply } from "./index";
