// ESLint flat config. Type-aware typescript-eslint rules over src/, test/, bench/ and scripts/, tuned to the
// mistakes that cost money or hang a request here: a promise nobody awaits (a charge committed after the
// reply, an unhandled rejection that kills the process), an async callback where a sync one is expected,
// `any` leaking in from JSON and wire input, a switch over an error code that misses a case.
// Why each rule: docs/decisions.md ("Lint and coverage").
import js from '@eslint/js';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'coverage/**', '.tap/**', 'node_modules/**', 'tools/**', 'deploy/**', 'bench/results/**', 'bench/.ab/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      globals: { ...globals.node },
      parserOptions: {
        project: './tsconfig.eslint.json',
        tsconfigRootDir: import.meta.dirname,
      },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // Promises: every one is awaited, returned, or handed to something that handles its rejection.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/return-await': ['error', 'in-try-catch'],
      '@typescript-eslint/prefer-promise-reject-errors': 'error',
      '@typescript-eslint/only-throw-error': 'error',
      // Exhaustive switches over unions (error codes, outcomes, eras); a default branch still counts.
      '@typescript-eslint/switch-exhaustiveness-check': [
        'error',
        { considerDefaultExhaustiveForUnions: true, requireDefaultForNonUnion: false },
      ],
      // An async function without `await` still turns a throw into a rejection, and store/provider
      // implementations are async to match their interface: not a bug here.
      '@typescript-eslint/require-await': 'off',
      // `let x!: T` assigned once after a closure that reads it (a callback wired before its target exists).
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        {
          argsIgnorePattern: '^_',
          varsIgnorePattern: '^_',
          caughtErrorsIgnorePattern: '^_',
          destructuredArrayIgnorePattern: '^_',
          ignoreRestSiblings: true,
        },
      ],
    },
  },
  {
    // Tests: tap's `t.test()` returns a promise the runner itself awaits (a failing subtest fails its parent),
    // so it is the one promise allowed to float. Tests read JSON replies as `any` and assert on them: an `any`
    // there fails an assertion, not a caller, so the no-unsafe-* family and no-explicit-any stay on for src/
    // (the wire and JSON boundaries) and are off here.
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafePromises: [{ from: 'package', package: '@tapjs/core', name: 'PromiseWithSubtest' }] },
      ],
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  {
    files: ['**/*.mjs', '**/*.js'],
    ...tseslint.configs.disableTypeChecked,
  },
);
