import { defineConfig } from 'vitest/config';

// One Gatehouse per test file (beforeAll); tests in a file share it and reset between them.
export default defineConfig({ test: { testTimeout: 30_000, hookTimeout: 30_000 } });
