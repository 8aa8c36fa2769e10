// Package entry: `import { Plugin, register } from "@foldhost/sdk-assemblyscript"`.
export * from "./assembly/index";
