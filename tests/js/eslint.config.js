// ESLint over static/: `make lint` runs
// `eslint --config tests/js/eslint.config.js static` from the top of the checkout. With an
// explicit --config the patterns below are relative to that working directory, not to this
// file. It lives here, next to tsconfig.json, because the broker serves static/ as it is.
//
// The recommended rules plus the few that catch real bugs in this code: loose equality
// (except the `== null` idiom), unused variables (a leading `_` marks one kept on purpose),
// a name that hides an outer one, a value returned from a promise executor (lost), and
// globals that do not exist where the file runs; no-var and prefer-const keep each
// declaration saying whether it changes.
//
// CommonJS: the top-level package.json has no "type", so Node loads .js files as CommonJS.

"use strict";

const js = require("@eslint/js");
const globals = require("globals");

const unused = { args: "after-used", argsIgnorePattern: "^_", varsIgnorePattern: "^_",
  caughtErrors: "all", caughtErrorsIgnorePattern: "^_", destructuredArrayIgnorePattern: "^_" };

module.exports = [
  {
    ignores: ["static/types/**", "static/vendor/**"],
  },
  js.configs.recommended,
  {
    files: ["static/**/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "module",
      globals: { ...globals.browser },
    },
    linterOptions: {
      reportUnusedDisableDirectives: "error",
    },
    rules: {
      eqeqeq: ["error", "smart"],
      "no-unused-vars": ["error", unused],
      "no-var": "error",
      "prefer-const": ["error", { destructuring: "all" }],
      "no-implicit-globals": "error",
      "no-self-compare": "error",
      "no-template-curly-in-string": "error",
      "no-unmodified-loop-condition": "error",
      "no-unreachable-loop": "error",
      "no-promise-executor-return": "error",
      "no-constructor-return": "error",
      "no-new-wrappers": "error",
      "no-throw-literal": "error",
      "array-callback-return": "error",
      "no-shadow": "error",
    },
  },
  {
    // The client modules (the npm package spool-broker-client) also run on Node and Deno.
    files: ["static/spool-*.js"],
    languageOptions: {
      globals: { ...globals.browser, ...globals.node },
    },
  },
  {
    // The dashboard pages that draw charts load uPlot as a classic script before them.
    files: ["static/js/**/*.js"],
    languageOptions: {
      globals: { uPlot: "readonly" },
    },
  },
  {
    // A classic script in <head> (not a module): it sets the theme before the first paint.
    files: ["static/js/theme-init.js"],
    languageOptions: {
      sourceType: "script",
    },
  },
];
