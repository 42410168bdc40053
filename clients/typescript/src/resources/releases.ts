// Release markers (`cicd` keys): a deploy recorded against the project's traffic.
import type { Gatehouse } from '../client.js';
import { pathOf } from '../client.js';
import type { CallOptions, RequestBody, Schema } from '../types.js';

export type ReleaseMarker = Schema<'ReleaseMarker'>;
export type NewReleaseMarker = RequestBody<'/api/v1/projects/{project_id}/release-markers/deploy', 'post'>;

export class Releases {
  readonly #gh: Gatehouse;
  constructor(gh: Gatehouse) {
    this.#gh = gh;
  }

  /**
   * `POST /api/v1/projects/{project_id}/release-markers/deploy` (201 new, 200 the same marker
   * again): `ts` is Unix seconds or RFC 3339.
   */
  deploy(projectId: string, marker: NewReleaseMarker, options?: CallOptions): Promise<ReleaseMarker> {
    const path = pathOf('/api/v1/projects/{project_id}/release-markers/deploy', { project_id: projectId });
    return this.#gh.request<ReleaseMarker>('POST', path, { ...options, body: marker });
  }
}
