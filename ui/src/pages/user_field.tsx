/** The user a page is about: any user id for an admin key, one of its users for another. */

import type { Identity } from "../api.ts";
import { DraftInput } from "../components.tsx";

const LAST_USER = "agentfleet.console.user";

export function defaultUser(identity: Identity): string {
  if (!identity.admin) return identity.userIds[0] ?? "";
  return sessionStorage.getItem(LAST_USER) ?? "";
}

export function UserField(props: {
  identity: Identity;
  value: string;
  onChange: (user: string) => void;
  /** For an admin: the label of the blank choice ("every user"), when blank is allowed. */
  everyone?: string;
  id?: string;
}) {
  const { identity, value, onChange } = props;
  const id = props.id ?? "user-field";
  if (!identity.admin) {
    return (
      <label for={id}>
        User
        <select id={id} name="user" value={value} onChange={(e) => onChange(e.currentTarget.value)}>
          {props.everyone && identity.userIds.length > 1 ? <option value="">{props.everyone}</option> : null}
          {identity.userIds.map((u) => (
            <option value={u}>{u}</option>
          ))}
        </select>
      </label>
    );
  }
  return (
    <label for={id}>
      User
      <DraftInput
        id={id}
        name="user"
        value={value}
        placeholder={props.everyone ?? "user id"}
        onCommit={(typed) => {
          const user = typed.trim();
          if (user) sessionStorage.setItem(LAST_USER, user);
          onChange(user);
        }}
      />
    </label>
  );
}
