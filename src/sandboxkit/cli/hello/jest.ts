import { expect, test } from '@jest/globals';

test('hello', () => {
  const greeting: string = 'hel' + 'lo';
  expect(greeting).toBe('hello');
});
